"""Helpers for talking to other processes over real rclpy, as a user's stack would."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import rclpy
import rclpy.executors

HELPERS = Path(__file__).parent / "helpers"

#: The most a wait for something that should happen spins (a frame's answer, a service, a
#: /diagnostics status, a subscription matching). It returns as soon as the condition holds, so a
#: well node never pays it; it is generous because the suite shares 2 cores with other work (a frame
#: of tiny-random takes ~0.3 s alone and took over 20 s with a second suite beside it).
WAIT_LIMIT_S = 120.0


def ros_test_node() -> Iterator[rclpy.node.Node]:
    """A plain rclpy node in this process, with its own context."""
    context = rclpy.context.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("test_probe", context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    node.executor_for_test = executor
    try:
        yield node
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)


def spin_until(node: rclpy.node.Node, done: Callable[[], bool], timeout_s: float) -> bool:
    """Spin ``node`` until ``done()`` holds or ``timeout_s`` passes; returns ``done()``."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        node.executor_for_test.spin_once(timeout_sec=0.05)
    return done()


def start_process(args: list[str]) -> subprocess.Popen[str]:
    """Start a Python helper in its own process, inheriting the sandboxed ROS environment."""
    return subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ),
    )


def stop_process(process: subprocess.Popen[str], timeout_s: float = 10.0) -> str:
    """Stop a helper politely (SIGINT, then SIGKILL) and return what it printed."""
    if process.poll() is None:
        process.send_signal(2)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
    output, _ = process.communicate()
    return output
