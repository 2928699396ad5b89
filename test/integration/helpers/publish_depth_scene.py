"""Publish colour, depth and camera_info of known geometry, 4 times a second, until stopped.

The depth is ``depth_scene.plane_z`` (a tilted plane across the whole frame) as 32FC1, the
camera_info carries ``depth_scene.SMALL_K``; all three share one stamp and the frame_id 'cam',
as a camera driver with depth registered to colour publishes them. The receiving test knows
the same geometry, so it can check every 3D number the node derives from the masks.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

import depth_scene as scene
from timed_publisher import RELIABLE, publish_until_stopped

FRAME_ID = "cam"


def messages(stamp_ns: int, rgb: np.ndarray) -> tuple[Image, Image, CameraInfo]:
    """The colour frame, its registered depth and the camera_info, all stamped ``stamp_ns``."""
    height, width = rgb.shape[:2]
    colour = Image(height=height, width=width, encoding="rgb8", step=width * 3)
    colour.data = rgb.tobytes()
    depth = Image(height=height, width=width, encoding="32FC1", step=width * 4)
    depth.data = scene.plane_z().astype("<f4").tobytes()
    info = CameraInfo(height=height, width=width, distortion_model="plumb_bob")
    # A rectified image: P[:3, :3] is the camera of its pixels (the scene's); K, the raw
    # camera's, differs, so a node that back-projects with K misplaces every point.
    info.k = [float(v) for v in scene.SMALL_RAW_K.ravel()]
    info.p = [float(v) for v in np.hstack([scene.SMALL_K, np.zeros((3, 1))]).ravel()]
    for msg in (colour, depth, info):
        msg.header.frame_id = FRAME_ID
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    return colour, depth, info


def start(node: Node) -> Callable[[], None]:
    """The scene's publishers on ``node``; the call that publishes one stamped set."""
    colour_pub = node.create_publisher(Image, "image", RELIABLE)
    depth_pub = node.create_publisher(Image, "depth", RELIABLE)
    info_pub = node.create_publisher(CameraInfo, "camera_info", RELIABLE)
    rgb = np.random.default_rng(3).integers(
        0, 256, (scene.SMALL_HEIGHT, scene.SMALL_WIDTH, 3), dtype=np.uint8
    )

    def publish() -> None:
        colour, depth, info = messages(time.time_ns(), rgb)
        # Depth and camera_info first: the node pairs a colour frame with depth it already has.
        info_pub.publish(info)
        depth_pub.publish(depth)
        colour_pub.publish(colour)

    return publish


def main() -> None:
    publish_until_stopped("depth_scene_publisher", 0.25, start)


if __name__ == "__main__":
    main()
