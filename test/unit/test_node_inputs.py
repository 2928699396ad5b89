"""The node's image inputs: raw subscriptions whose callbacks read only the header, in a callback
group per camera, so a busy input holds neither another camera nor the parameter services.

A real ``Sam3Node`` in this process with a scripted segmenter; images are published over the
node's real (sandboxed) DDS by a second node in the same context.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import numpy as np
import rclpy
from rcl_interfaces.srv import GetParameters
from rclpy.executors import MultiThreadedExecutor
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from scripted_segmenter import ScriptedSegmenter
from sensor_msgs.msg import Image

from tt_sam3_ros.ros import raw_frames
from tt_sam3_ros.ros.node import Sam3Node


def _spinning(context, *nodes) -> tuple[MultiThreadedExecutor, threading.Event]:
    executor = MultiThreadedExecutor(num_threads=4, context=context)
    for node in nodes:
        executor.add_node(node)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set() and rclpy.ok(context=context):
            executor.spin_once(timeout_sec=0.05)

    threading.Thread(target=spin, daemon=True).start()
    return executor, stop


def _image(stamp_s: int) -> Image:
    msg = Image(height=6, width=8, encoding="rgb8", step=24, data=bytes(np.full(144, 7, np.uint8)))
    msg.header.stamp.sec, msg.header.frame_id = stamp_s, "cam"
    return msg


def _wait(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(condition())


def _active_node(context, segmenter: ScriptedSegmenter) -> Sam3Node:
    overrides = [
        Parameter("autostart", value=False),
        Parameter("model_id", value="tiny-random"),
        Parameter("prompts", value=["car"]),
        Parameter("qos_reliability", value="reliable"),
        Parameter("qos_depth", value=10),
    ]
    sam3 = Sam3Node(context=context, parameter_overrides=overrides)
    sam3._build_segmenter = lambda request, device: segmenter
    assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert sam3.trigger_activate() == TransitionCallbackReturn.SUCCESS
    return sam3


@contextlib.contextmanager
def _streaming(context, segmenter: ScriptedSegmenter, release: threading.Event) -> Iterator[tuple]:
    """An active node and a second node publishing reliable images to it, both spinning.

    Yields (the node, the second node, the image publisher); ``release`` is set at the end, so
    nothing the test holds outlives it."""
    sam3 = _active_node(context, segmenter)
    peer = rclpy.create_node("peer", context=context)
    executor, stop = _spinning(context, sam3, peer)
    try:
        publisher = peer.create_publisher(
            Image, "image", QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        )
        assert _wait(lambda: publisher.get_subscription_count() > 0)
        yield sam3, peer, publisher
    finally:
        release.set()
        stop.set()
        executor.shutdown()
        sam3.shut_down()
        sam3.destroy_node()
        peer.destroy_node()


def test_only_the_frame_the_worker_takes_is_deserialised(context, monkeypatch) -> None:
    gate = threading.Event()
    segmenter = ScriptedSegmenter(gate=gate)
    deserialised: list[int] = []
    original = raw_frames.deserialize_message

    def counting(serialized, msg_type):
        deserialised.append(len(serialized))
        return original(serialized, msg_type)

    monkeypatch.setattr(raw_frames, "deserialize_message", counting)
    with _streaming(context, segmenter, gate) as (sam3, _, publisher):
        publisher.publish(_image(1))
        assert segmenter.entered.wait(10), "the first frame never reached the engine"
        for stamp_s in range(2, 12):  # ten frames while the engine is busy: all but the last dropped
            publisher.publish(_image(stamp_s))
        stats = next(iter(sam3._cameras.values())).state.stats
        assert _wait(lambda: stats.camera.snapshot().received == 11)
        assert len(deserialised) == 1, "expected the taken frame alone deserialised, by the worker"
        gate.set()
        assert _wait(lambda: segmenter.calls == 2)
        assert len(deserialised) == 2


def test_the_parameter_services_answer_while_an_image_callback_is_busy(context, monkeypatch) -> None:
    held = threading.Event()
    release = threading.Event()

    def slow_image(self, camera, msg) -> None:  # stands for a slow input callback
        held.set()
        release.wait(30)

    monkeypatch.setattr(Sam3Node, "_on_image", slow_image)
    with _streaming(context, ScriptedSegmenter(), release) as (_, peer, publisher):
        publisher.publish(_image(1))
        assert held.wait(10), "the image callback never ran"
        client = peer.create_client(GetParameters, "/sam3/get_parameters")
        assert client.wait_for_service(timeout_sec=10)
        future = client.call_async(GetParameters.Request(names=["threshold"]))
        assert _wait(future.done, timeout_s=5), "get_parameters waited behind the image callback"
        assert len(future.result().values) == 1
