"""Publish one fixed Detection2DArray and one fixed mono8 Image every 100 ms until stopped.

The receiving test rebuilds the same messages from ``expected_messages`` and compares
field by field, so both sides agree on what "intact" means.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import Image
from vision_msgs.msg import BoundingBox2D, Detection2D, Detection2DArray, ObjectHypothesisWithPose

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from timed_publisher import RELIABLE, publish_until_stopped


def expected_messages() -> tuple[Detection2DArray, Image]:
    """The pair both processes agree on: two detections and a 5x4 mono8 label image."""
    detections = Detection2DArray()
    detections.header.frame_id = "camera_optical"
    detections.header.stamp.sec = 1234
    detections.header.stamp.nanosec = 567
    for index, (label, score) in enumerate([("car", 0.875), ("person", 0.5)], start=1):
        detection = Detection2D()
        detection.header = detections.header
        detection.id = str(index)
        hypothesis = ObjectHypothesisWithPose()
        hypothesis.hypothesis.class_id = label
        hypothesis.hypothesis.score = score
        detection.results.append(hypothesis)
        detection.bbox = BoundingBox2D()
        detection.bbox.center.position.x = 10.5 * index
        detection.bbox.center.position.y = 20.25
        detection.bbox.size_x = 3.0
        detection.bbox.size_y = 4.0
        detections.detections.append(detection)

    labels = np.zeros((4, 5), dtype=np.uint8)
    labels[1:3, 1:4] = 1
    labels[3, 4] = 2
    mask = Image()
    mask.header = detections.header
    mask.height, mask.width = labels.shape
    mask.encoding = "mono8"
    mask.step = mask.width
    mask.data = labels.tobytes()
    return detections, mask


def start(node: Node) -> Callable[[], None]:
    """The two publishers on ``node``; the call that publishes the pair once."""
    detections_pub = node.create_publisher(Detection2DArray, "plumbing/detections", RELIABLE)
    mask_pub = node.create_publisher(Image, "plumbing/masks", RELIABLE)
    detections, mask = expected_messages()

    def publish() -> None:
        detections_pub.publish(detections)
        mask_pub.publish(mask)

    return publish


def main() -> None:
    publish_until_stopped("fixed_publisher", 0.1, start)


if __name__ == "__main__":
    main()
