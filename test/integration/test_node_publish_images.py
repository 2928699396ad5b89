"""`tt-sam3 publish-images`: pictures and videos reach a subscriber as the node expects them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers.sam3_client import scene
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_harness import WAIT_LIMIT_S, spin_until, stop_process
from sensor_msgs.msg import CompressedImage, Image

from tt_sam3_ros.ros.messages import compressed_to_rgb, image_to_rgb

QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)  # as the node subscribes


def _publisher(args: list[str]) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "tt_sam3_ros.ros.publish_images", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _write_pictures(folder: Path) -> dict[str, np.ndarray]:
    pictures = {
        "frame_000.png": scene(seed=1, width=40, height=30),
        "frame_001.png": scene(seed=2, width=40, height=30),
    }
    for name, rgb in pictures.items():
        cv2.imwrite(str(folder / name), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    (folder / "notes.txt").write_text("not a picture")
    return pictures


def test_a_folder_is_published_as_rgb8_in_name_order_and_looped(ros_node, tmp_path: Path) -> None:
    pictures = _write_pictures(tmp_path)
    received: list[Image] = []
    ros_node.create_subscription(Image, "camera/image", received.append, QOS)
    process = _publisher([str(tmp_path), "--topic", "camera/image", "--rate", "20", "--frame-id", "cam"])
    try:
        assert spin_until(ros_node, lambda: len(received) >= 6, WAIT_LIMIT_S), "fewer than 6 frames arrived"
    finally:
        output = stop_process(process)
    assert process.returncode == 0, output
    frames = [image_to_rgb(msg) for msg in received]
    expected = list(pictures.values())
    # Consecutive frames alternate between the two pictures, in name order, looping.
    first = next(i for i, rgb in enumerate(frames) if np.array_equal(rgb, expected[0]))
    for offset, rgb in enumerate(frames[first:]):
        np.testing.assert_array_equal(rgb, expected[offset % 2])
    assert all(msg.header.frame_id == "cam" and msg.encoding == "rgb8" for msg in received)
    stamps = [msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec for msg in received]
    assert stamps == sorted(stamps) and stamps[0] > 0


def test_a_video_is_published_compressed_once(ros_node, tmp_path: Path) -> None:
    video = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 10, (48, 32))
    if not writer.isOpened():
        pytest.skip("this OpenCV build cannot write an MJPG AVI")
    for seed in range(3):
        writer.write(cv2.cvtColor(scene(seed=seed, width=48, height=32), cv2.COLOR_RGB2BGR))
    writer.release()
    received: list[CompressedImage] = []
    ros_node.create_subscription(CompressedImage, "cam/compressed", received.append, QOS)
    process = _publisher([str(video), "--topic", "cam", "--rate", "5", "--compressed", "--once"])
    try:
        spin_until(ros_node, lambda: process.poll() is not None and len(received) >= 1, WAIT_LIMIT_S)
    finally:
        output = stop_process(process)
    assert process.returncode == 0, output
    assert 1 <= len(received) <= 3, "one pass over a 3-frame video"
    assert all(compressed_to_rgb(msg).shape == (32, 48, 3) for msg in received)


def test_an_empty_folder_is_an_error(tmp_path: Path) -> None:
    process = _publisher([str(tmp_path)])
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "holds no pictures" in output
