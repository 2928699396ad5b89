"""Publish a folder of pictures or a video as a camera would, so the node can be tried without one.

    tt-sam3 publish-images DIR_OR_VIDEO [--topic image] [--rate 5] [--frame-id camera]
                           [--compressed] [--once]

Frames go out as sensor_msgs/Image rgb8 on TOPIC (or, with --compressed, as JPEG
sensor_msgs/CompressedImage on TOPIC/compressed), stamped with the time of sending,
in a loop until Ctrl-C (--once: one pass, started when a subscriber is there). Watch
the result with any image viewer on /sam3/overlay.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import rclpy
import rclpy.logging
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from tt_sam3_ros.core.video import frames
from tt_sam3_ros.ros import messages

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp"}
# Reliable publishers reach best-effort and reliable subscribers alike; depth 1 keeps
# the newest frame only, as a camera driver would.
PUBLISH_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tt-sam3 publish-images", description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a folder of PNG/JPEG/... pictures, or a video file")
    parser.add_argument("--topic", default="image", help="image topic (default: image)")
    parser.add_argument("--rate", type=float, default=5.0, help="frames per second (default: 5)")
    parser.add_argument("--frame-id", default="camera", help="header.frame_id (default: camera)")
    parser.add_argument("--compressed", action="store_true", help="publish JPEG on TOPIC/compressed")
    parser.add_argument(
        "--once", action="store_true", help="one pass instead of looping, once a subscriber is there"
    )
    args = parser.parse_args(argv)
    if not args.rate > 0:
        parser.error("--rate must be positive")
    if not args.source.exists():
        parser.error(f"{args.source} does not exist")
    return args


def picture_files(folder: Path) -> list[Path]:
    """The pictures in ``folder``, sorted by name (so numbered frames play in order)."""
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def folder_frames(files: list[Path]) -> Iterator[tuple[str, np.ndarray | None]]:
    """(name, uint8 RGB or None when unreadable) for each file."""
    for path in files:
        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        yield path.name, None if bgr is None else cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def video_frames(path: Path) -> Iterator[tuple[str, np.ndarray | None]]:
    """(name, uint8 RGB) for each frame of the video at ``path``."""
    for index, rgb in frames(path):
        yield f"{path.name}#{index}", rgb


class ImagePublisher(Node):
    """Publishes one frame per timer tick, looping over the source unless ``once``."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__("publish_images")
        self._args = args
        self._files = picture_files(args.source) if args.source.is_dir() else []
        if args.source.is_dir() and not self._files:
            raise ValueError(f"{args.source} holds no pictures ({', '.join(sorted(IMAGE_SUFFIXES))})")
        self._frames = self._pass()
        self._published = 0
        self.finished = False
        if args.compressed:
            self._publisher = self.create_publisher(CompressedImage, f"{args.topic}/compressed", PUBLISH_QOS)
        else:
            self._publisher = self.create_publisher(Image, args.topic, PUBLISH_QOS)
        self.create_timer(1.0 / args.rate, self._publish_next)
        self.get_logger().info(
            f"publishing {args.source} on {self._publisher.topic_name} at {args.rate:g} Hz"
        )

    def _pass(self) -> Iterator[tuple[str, np.ndarray | None]]:
        return folder_frames(self._files) if self._files else video_frames(self._args.source)

    def _next_frame(self) -> tuple[str, np.ndarray] | None:
        """The next readable frame; starts a new pass at the end unless ``once``."""
        for _restart in range(2):
            for name, rgb in self._frames:
                if rgb is None:
                    self.get_logger().warning(f"cannot read {name}; skipped")
                    continue
                return name, rgb
            if self._args.once or self._published == 0:
                return None
            self._frames = self._pass()
        return None

    def _publish_next(self) -> None:
        if self.finished:
            return
        if self._args.once and self._publisher.get_subscription_count() == 0:
            # One pass to nobody would be lost; a looping publisher just keeps going.
            self.get_logger().info(
                f"--once: waiting for a subscriber on {self._publisher.topic_name}", throttle_duration_sec=5.0
            )
            return
        frame = self._next_frame()
        if frame is None:
            self.finished = True
            if self._published == 0:
                self.get_logger().error(f"no readable frame in {self._args.source}")
            return
        name, rgb = frame
        header = Header(frame_id=self._args.frame_id)
        header.stamp = self.get_clock().now().to_msg()
        self._publisher.publish(self._message(rgb, header))
        self._published += 1
        self.get_logger().debug(f"published {name}")

    def _message(self, rgb: np.ndarray, header: Header) -> Image | CompressedImage:
        if not self._args.compressed:
            return messages.rgb_to_image(rgb, header)
        ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        if not ok:
            raise ValueError("OpenCV could not encode a JPEG")
        return CompressedImage(header=header, format="jpeg", data=jpeg.tobytes())

    @property
    def published(self) -> int:
        return self._published


def main(argv: list[str] | None = None) -> int:
    """Run until Ctrl-C (or the end of one pass with --once); 0 on success, 2 on bad input."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rclpy.init()
    node: ImagePublisher | None = None
    try:
        node = ImagePublisher(args)
        while rclpy.ok() and not node.finished:
            rclpy.spin_once(node, timeout_sec=0.1)
        interrupted = not rclpy.ok()
        return 0 if interrupted or node.published else 2
    except ValueError as error:
        rclpy.logging.get_logger("publish_images").error(str(error))
        return 2
    except (KeyboardInterrupt, ExternalShutdownException):
        return 0
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    sys.exit(main())
