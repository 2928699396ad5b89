"""depth:=true end to end: a feeder process sends colour, depth and camera_info of a known plane;
this process checks the node's Detection3DArray and PointCloud2 against that geometry.

The tiny random model's masks are meaningless but real: for every instance, the 3D numbers must
be those of the plane's points under that instance's pixels of the published mask.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers.sam3_client import Sam3Client, log_tail, mask_pixels, running_node, stamp_ns
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_harness import HELPERS, WAIT_LIMIT_S, spin_until, start_process, stop_process
from sensor_msgs.msg import PointCloud2
from vision_msgs.msg import Detection3DArray

from tt_sam3_ros.core.depth import STATS_POINT_BUDGET
from tt_sam3_ros.ros.messages_3d import POINT_FIELDS, cloud_from_message

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

import depth_scene as scene
from helpers.publish_depth_scene import messages as scene_messages

MIN_POINTS = 5
STRIDE = 3
NODE_PARAMS = {
    "model_id": "tiny-random",
    "prompts": "['box', 'wall']",
    "threshold": "0.0",
    "max_instances": "6",
    "depth": "true",
    "depth_min_points": str(MIN_POINTS),
    "depth_max_skew_s": "0.01",
    "points_stride": str(STRIDE),
}
CENTRE_TOLERANCE_M = 0.005
SIZE_TOLERANCE_M = 0.01


class DepthClient(Sam3Client):
    """The probe also collects the 3D outputs and can send depth and camera_info itself."""

    def __init__(self, client: Sam3Client) -> None:
        self.__dict__.update(client.__dict__)
        self.detections_3d: dict[int, Detection3DArray] = {}
        self.clouds: dict[int, PointCloud2] = {}
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        self.probe.create_subscription(
            Detection3DArray,
            "/sam3/detections_3d",
            lambda m: self.detections_3d.__setitem__(stamp_ns(m), m),
            reliable,
        )
        self.probe.create_subscription(
            PointCloud2, "/sam3/points", lambda m: self.clouds.__setitem__(stamp_ns(m), m), reliable
        )
        from sensor_msgs.msg import CameraInfo, Image

        self.depth_pub = self.probe.create_publisher(Image, "depth", reliable)
        self.info_pub = self.probe.create_publisher(CameraInfo, "camera_info", reliable)

    def complete(self) -> list[int]:
        """Stamps for which 2D detections, mask, 3D detections and cloud have all arrived."""
        return [
            key
            for key in self.detections_3d
            if key in self.detections and key in self.masks and key in self.clouds
        ]

    def depth_status(self, where) -> dict[str, str]:
        return self.next_diagnostics(where=lambda d: "frames_3d" in d and where(d))


@pytest.fixture(scope="module")
def sam3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DepthClient]:
    log_path = tmp_path_factory.mktemp("sam3_depth") / "node.log"
    with running_node(NODE_PARAMS, log_path) as client:
        yield DepthClient(client)


def test_3d_outputs_match_the_geometry_fed_in(sam3: DepthClient) -> None:
    feeder = start_process([str(HELPERS / "publish_depth_scene.py")])
    try:
        arrived = spin_until(sam3.probe, lambda: len(sam3.complete()) >= 1, 150.0)
    finally:
        feeder_output = stop_process(feeder)
    assert arrived, (
        f"no complete 3D answer\nfeeder: {feeder_output[-2000:]}\nnode:\n{log_tail(sam3.log_path)}"
    )
    for key in sam3.complete():
        _check_frame(sam3.detections[key], sam3.masks[key], sam3.detections_3d[key], sam3.clouds[key])


def _check_frame(detections_2d, mask, detections_3d, cloud) -> None:
    assert detections_3d.header == detections_2d.header and cloud.header == detections_2d.header
    labels = mask_pixels(mask)
    by_id = {d.id: d for d in detections_2d.detections}
    # Mask value k is the k-th 2D detection; its id (a track id while tracking) names it in 3D.
    value_of = {d.id: k for k, d in enumerate(detections_2d.detections, start=1)}
    measured = {d.id: d for d in detections_3d.detections}
    # The plane is behind every pixel: each instance with enough mask pixels is measured.
    expected_ids = {i for i in by_id if np.count_nonzero(labels == value_of[i]) >= MIN_POINTS}
    assert set(measured) == expected_ids and expected_ids, "the tiny model at threshold 0 gives instances"
    for instance_id, detection in measured.items():
        assert detection.header == detections_2d.header
        source = by_id[instance_id].results[0].hypothesis
        assert detection.results[0].hypothesis.class_id == source.class_id
        assert detection.results[0].hypothesis.score == source.score
        truth = scene.plane_points(labels == value_of[instance_id])
        position, size = detection.bbox.center.position, detection.bbox.size
        pose = detection.results[0].pose.pose.position
        _check_statistics(
            truth, (position.x, position.y, position.z), (size.x, size.y, size.z), (pose.x, pose.y, pose.z)
        )
        assert detection.bbox.center.orientation.w == 1.0
    points = cloud_from_message(cloud)
    assert cloud.is_dense and not cloud.is_bigendian and cloud.height == 1
    strided = labels[::STRIDE, ::STRIDE]
    id_of_value = {k: int(d.id) for k, d in enumerate(detections_2d.detections, start=1)}
    assert set(np.unique(points["instance"])) == {id_of_value[int(v)] for v in np.unique(strided) if v}
    for value in np.unique(strided):
        if not value:
            continue
        mine = points[points["instance"] == id_of_value[int(value)]]
        keep = np.zeros_like(labels, dtype=bool)
        keep[::STRIDE, ::STRIDE] = strided == value
        expected = scene.plane_points(keep)
        np.testing.assert_allclose(np.stack([mine["x"], mine["y"], mine["z"]], axis=1), expected, atol=1e-5)


def _check_statistics(truth: np.ndarray, centre: tuple, size: tuple, median: tuple) -> None:
    """The box and the hypothesis' pose against the instance's true points.

    ``centre +- size / 2`` must hold at least 98 % of the points on every axis (what a collision
    checker relies on), and be no bigger than their whole extent plus a pixel. The pose is their
    per-axis median: exact up to the tolerance for an instance of at most STATS_POINT_BUDGET
    pixels; above, the node measures an even sample of about that many, so its median may sit a
    few percentile ranks off the exact one.
    """
    centre, size, median = np.array(centre), np.array(size), np.array(median)
    quantum = 1e-5  # float32 rounding
    held = ((truth >= centre - size / 2 - quantum) & (truth <= centre + size / 2 + quantum)).mean(axis=0)
    assert np.all(held >= 0.98), held
    pixel = truth[:, 2].max() / scene.SMALL_K[0, 0]
    assert np.all(size <= np.ptp(truth, axis=0) + pixel + SIZE_TOLERANCE_M), (size, np.ptp(truth, axis=0))
    if len(truth) <= STATS_POINT_BUDGET:
        np.testing.assert_allclose(median, np.median(truth, axis=0), atol=CENTRE_TOLERANCE_M)
        return
    # Three standard errors of a percentile of a 1000-point sample, in percentile ranks: loose for a
    # sample of ~2048, tight enough that a wrong K, mask or instance is far outside.
    spread = 100.0 * 3.0 * np.sqrt(0.25 / 1000)
    low, high = np.percentile(truth, (50.0 - spread, 50.0 + spread), axis=0)
    assert np.all(median >= low - CENTRE_TOLERANCE_M) and np.all(median <= high + CENTRE_TOLERANCE_M)


def test_a_frame_without_depth_in_tolerance_is_answered_in_2d_only(sam3: DepthClient) -> None:
    colour, _, _ = scene_messages(0, np.zeros((scene.SMALL_HEIGHT, scene.SMALL_WIDTH, 3), np.uint8))
    detections, _ = sam3.ask(colour)
    key = stamp_ns(detections)
    status = sam3.depth_status(lambda d: int(d["frames_without_depth"]) >= 1)
    assert "from the colour frame" in status["last_error"] or "no depth" in status["last_error"]
    assert key not in sam3.detections_3d and key not in sam3.clouds


def test_depth_from_another_frame_is_refused_and_2d_keeps_flowing(sam3: DepthClient) -> None:
    import time

    spin_until(sam3.probe, lambda: sam3.depth_pub.get_subscription_count() > 0, WAIT_LIMIT_S)
    spin_until(sam3.probe, lambda: sam3.info_pub.get_subscription_count() > 0, WAIT_LIMIT_S)
    key = time.time_ns()
    colour, depth, info = scene_messages(key, np.zeros((scene.SMALL_HEIGHT, scene.SMALL_WIDTH, 3), np.uint8))
    depth.header.frame_id = "camera_depth_optical_frame"
    sam3.info_pub.publish(info)
    sam3.depth_pub.publish(depth)
    spin_until(sam3.probe, lambda: False, 0.5)  # let depth and camera_info arrive first
    sam3.send(colour)
    sam3.answer(key)
    status = sam3.depth_status(lambda d: int(d["depth_rejected"]) >= 1)
    assert "frame_id 'camera_depth_optical_frame'" in status["last_error"]
    assert key not in sam3.detections_3d


#: The message type each display class of config/sam3.rviz subscribes to (rviz_default_plugins'
#: and vision_msgs_rviz_plugins' plugin descriptions).
RVIZ_DISPLAY_TYPES = {
    "rviz_default_plugins/Image": "sensor_msgs/msg/Image",
    "rviz_default_plugins/PointCloud2": "sensor_msgs/msg/PointCloud2",
    "vision_msgs_rviz_plugins/Detection3DArray": "vision_msgs/msg/Detection3DArray",
}
RVIZ_CONFIG = Path(__file__).resolve().parents[2] / "config" / "sam3.rviz"


def test_every_topic_the_rviz_config_shows_is_one_the_node_publishes(sam3: DepthClient) -> None:
    """rviz:=true must show the node's outputs: each display's topic and type against the running
    node's own publishers (depth on, so the 3D outputs exist)."""
    import yaml

    displays = yaml.safe_load(RVIZ_CONFIG.read_text())["Visualization Manager"]["Displays"]
    shown = {(display["Topic"]["Value"], RVIZ_DISPLAY_TYPES[display["Class"]]) for display in displays}
    assert {topic for topic, _ in shown} >= {
        "/sam3/overlay",
        "/sam3/masks",
        "/sam3/points",
        "/sam3/detections_3d",
    }

    def published() -> set[tuple[str, str]]:
        # Per topic, from endpoint discovery (the by-node view once lagged 120 s in CI).
        return {
            (topic, info.topic_type)
            for topic, _ in shown
            for info in sam3.probe.get_publishers_info_by_topic(topic)
        }

    spin_until(sam3.probe, lambda: shown <= published(), WAIT_LIMIT_S)
    assert shown - published() == set(), f"the node publishes {sorted(published())}"
    # The cloud display colours points by the field that holds the instance (every cloud's fields).
    cloud = next(d for d in displays if d["Class"] == "rviz_default_plugins/PointCloud2")
    assert cloud["Color Transformer"] == "Intensity" and cloud["Channel Name"] == "instance"
    assert "instance" in [name for name, _, _ in POINT_FIELDS]
