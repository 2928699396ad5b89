"""Two processes on one machine: messages cross DDS with every field intact."""

from __future__ import annotations

import numpy as np
from helpers.publish_fixed import expected_messages
from rclpy.qos import QoSProfile, ReliabilityPolicy
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
