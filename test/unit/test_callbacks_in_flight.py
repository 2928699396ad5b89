"""The exit path waits for the node's own callbacks still running, whatever executor spins it.

A real ``Sam3Node`` in this process; a subscription callback held in flight on an executor
thread stands for a slow parameter or image callback at the moment of a stop.
"""

from __future__ import annotations

import threading
import time

import pytest
import rclpy
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.parameter import Parameter
from std_msgs.msg import String

from tt_sam3_ros.ros import main
from tt_sam3_ros.ros.node import Sam3Node


def _held_callback(sam3: Sam3Node, release: threading.Event) -> threading.Event:
    """A subscription of the node whose callback runs until ``release``; returns 'it has begun'."""
    begun = threading.Event()

    def callback(_msg: String) -> None:
        begun.set()
        release.wait(30)

    sam3.create_subscription(String, "held", callback, 10)
    sam3.create_publisher(String, "held", 10).publish(String(data="x"))
    return begun


@pytest.mark.parametrize("executor_type", [SingleThreadedExecutor, MultiThreadedExecutor])
def test_the_drain_waits_for_a_callback_in_flight(context, executor_type) -> None:
    sam3 = Sam3Node(context=context, parameter_overrides=[Parameter("autostart", value=False)])
    executor = executor_type(context=context)
    executor.add_node(sam3)
    release = threading.Event()
    spinning = threading.Event()
    try:
        begun = _held_callback(sam3, release)

        def spin() -> None:
            while not spinning.is_set() and rclpy.ok(context=context):
                executor.spin_once(timeout_sec=0.05)

        spinner = threading.Thread(target=spin, daemon=True)
        spinner.start()
        assert begun.wait(10), "the callback never ran"
        spinning.set()
        drained = threading.Event()
        drainer = threading.Thread(target=lambda: (main._drain(sam3, timeout_s=20), drained.set()))
        drainer.start()
        time.sleep(0.3)
        assert not drained.is_set(), "the drain returned with a callback still running"
        assert sam3.callbacks_running == 1
        release.set()
        assert drained.wait(10), "the drain did not return once the callback did"
        assert sam3.callbacks_running == 0
    finally:
        release.set()
        spinning.set()
        executor.shutdown()
        sam3.destroy_node()


def test_the_drain_gives_up_at_its_bound_and_says_so(context, capfd) -> None:
    sam3 = Sam3Node(context=context, parameter_overrides=[Parameter("autostart", value=False)])
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(sam3)
    release = threading.Event()
    try:
        begun = _held_callback(sam3, release)
        spinner = threading.Thread(target=lambda: executor.spin_once(timeout_sec=5), daemon=True)
        spinner.start()
        assert begun.wait(10)
        started = time.monotonic()
        main._drain(sam3, timeout_s=0.5)
        assert time.monotonic() - started < 5
        assert "1 callback(s) still running" in capfd.readouterr().err
    finally:
        release.set()
        executor.shutdown()
        sam3.destroy_node()
