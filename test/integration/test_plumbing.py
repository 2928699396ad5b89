"""Two processes on one machine: messages cross DDS with every field intact, and the harness's
service calls survive an answer DDS dropped."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import sam3_client
from helpers.publish_fixed import expected_messages
from helpers.sam3_client import Sam3Client
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.task import Future
from ros_harness import HELPERS, WAIT_LIMIT_S, spin_until, start_process, stop_process
from sensor_msgs.msg import Image
from vision_msgs.msg import Detection2DArray


def test_detections_and_mask_cross_processes_intact(ros_node) -> None:
    received: dict[str, object] = {}
    qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)
    ros_node.create_subscription(
        Detection2DArray, "plumbing/detections", lambda m: received.setdefault("detections", m), qos
    )
    ros_node.create_subscription(Image, "plumbing/masks", lambda m: received.setdefault("mask", m), qos)

    publisher = start_process([str(HELPERS / "publish_fixed.py")])
    try:
        got_both = spin_until(ros_node, lambda: len(received) == 2, WAIT_LIMIT_S)
    finally:
        log = stop_process(publisher)
    assert got_both, f"nothing arrived from the publisher process; its output:\n{log}"

    want_detections, want_mask = expected_messages()
    assert received["detections"] == want_detections
    assert received["mask"] == want_mask
    detection = received["detections"].detections[0]
    assert detection.results[0].hypothesis.class_id == "car"
    assert detection.results[0].hypothesis.score == 0.875
    mask = received["mask"]
    labels = np.frombuffer(bytes(mask.data), dtype=np.uint8).reshape(mask.height, mask.width)
    assert labels.tolist() == [[0, 0, 0, 0, 0], [0, 1, 1, 1, 0], [0, 1, 1, 1, 0], [0, 0, 0, 0, 2]]
    assert mask.header.frame_id == "camera_optical"


class _DropsFirstAnswer:
    """A service client whose first request's answer never comes, as when the node's response
    writer had not yet matched our reader; the second is answered."""

    srv_name = "/sam3/get_state"

    def __init__(self) -> None:
        self.sent = 0
        self.forgotten: list[Future] = []

    def wait_for_service(self, timeout_sec: float) -> bool:
        return True

    def call_async(self, request: object) -> Future:
        self.sent += 1
        future = Future()
        if self.sent > 1:
            future.set_result("answer")
        return future

    def remove_pending_request(self, future: Future) -> None:
        self.forgotten.append(future)


def test_a_read_whose_answer_was_lost_is_sent_again(ros_node, monkeypatch) -> None:
    monkeypatch.setattr(sam3_client, "RESEND_S", 0.2)
    client = _DropsFirstAnswer()
    assert Sam3Client(ros_node)._call(client, object(), timeout_s=5.0) == "answer"
    assert client.sent == 2 and len(client.forgotten) == 1


def test_a_transition_is_never_sent_twice(ros_node, monkeypatch) -> None:
    monkeypatch.setattr(sam3_client, "RESEND_S", 0.2)
    client = _DropsFirstAnswer()
    with pytest.raises(AssertionError, match=r"did not answer within 1\.0 s"):
        Sam3Client(ros_node)._call(client, object(), timeout_s=1.0, idempotent=False)
    assert client.sent == 1
