"""Pairing depth with colour by stamp, the depth status, and the 3D answer of one frame (no ROS graph)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sensor_msgs.msg")
pytest.importorskip("vision_msgs.msg")

from diagnostic_msgs.msg import DiagnosticStatus
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import Header

from tt_sam3_ros.core import depth_pairing
from tt_sam3_ros.core.depth_pairing import DepthPairing, DepthSettings, DepthStats
from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.results import Instance, SegmentationResult
from tt_sam3_ros.ros import messages, messages_3d
from tt_sam3_ros.ros.diagnostics import depth_status

SUPPORT = Path(__file__).resolve().parents[1] / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

import depth_scene as scene  # noqa: E402

FRAME = "camera_color_optical_frame"
MS = 1_000_000


def stamped(msg, stamp_ns: int, frame_id: str = FRAME):
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    msg.header.frame_id = frame_id
    return msg


def depth_image_msg(stamp_ns: int, pixels: np.ndarray | None = None, frame_id: str = FRAME) -> Image:
    pixels = np.full((4, 4), 1000, np.uint16) if pixels is None else pixels
    msg = Image(height=pixels.shape[0], width=pixels.shape[1], step=pixels.shape[1] * pixels.itemsize)
    msg.encoding = "16UC1" if pixels.dtype == np.uint16 else "32FC1"
    msg.data = pixels.astype(pixels.dtype.newbyteorder("<")).tobytes()
    return stamped(msg, stamp_ns, frame_id)


def depth_msg(stamp_ns: int, pixels: np.ndarray | None = None, frame_id: str = FRAME):
    """A depth frame as the node's callback hands it to the pairing."""
    return messages_3d.depth_frame(depth_image_msg(stamp_ns, pixels, frame_id))


def camera_info_msg(
    k: np.ndarray = scene.K, size: tuple[int, int] = (scene.HEIGHT, scene.WIDTH)
) -> CameraInfo:
    msg = CameraInfo(height=size[0], width=size[1])
    msg.k = [float(v) for v in k.ravel()]
    return stamped(msg, 0)


def info_msg(k: np.ndarray = scene.K, size: tuple[int, int] = (scene.HEIGHT, scene.WIDTH)):
    """A CameraInfo as the node's callback hands it to the pairing."""
    return messages_3d.camera_info_data(camera_info_msg(k, size))


def answer_messages(header, result, labels, detections, pairing, want_cloud):
    """The 3D answer converted as the node publishes it: (Detection3DArray, PointCloud2 or None)."""
    answer = depth_pairing.answer(header.frame_id, result, labels, pairing, DepthSettings(), want_cloud)
    cloud = None if answer.points is None else messages_3d.cloud_to_message(answer.points, header)
    return messages_3d.detections_3d(detections, answer.geometries, header), cloud


def test_unstamped_depth_pairs_with_the_newest_colour_frame() -> None:
    """A depth stream without stamps (0) cannot be paired by time: its newest frame is used."""
    pairing = DepthPairing()
    pairing.set_camera_info(info_msg())
    pairing.add_depth(depth_msg(0, np.full((4, 4), 1000, np.uint16)))
    pairing.note_colour(5000 * MS)
    pairing.claim(5000 * MS)
    pairing.add_depth(depth_msg(0, np.full((4, 4), 2000, np.uint16)))  # arrives during segmentation
    found = pairing.take(5000 * MS, max_skew_s=0.02)
    assert found.reason == "" and found.depth.stamp_ns == 0
    assert int(found.depth.pixels[0, 0]) == 2000  # the newest one
    # A stamped frame within the skew still wins over unstamped ones.
    pairing.add_depth(depth_msg(6010 * MS, np.full((4, 4), 3000, np.uint16)))
    assert int(pairing.take(6000 * MS, max_skew_s=0.02).depth.pixels[0, 0]) == 3000


def test_pairs_the_nearest_depth_frame_within_the_skew() -> None:
    pairing = DepthPairing()
    pairing.set_camera_info(info_msg())
    for offset_ms in (-40, -8, 25):
        pairing.add_depth(depth_msg(1000 * MS + offset_ms * MS))
    found = pairing.take(1000 * MS, max_skew_s=0.02)
    assert found.reason == "" and found.depth.stamp_ns == 992 * MS
    too_far = pairing.take(1000 * MS, max_skew_s=0.005)
    assert too_far.depth is None and "8.0 ms from the colour frame" in too_far.reason


def test_depth_arriving_after_the_colour_frame_is_paired() -> None:
    """The pending colour frame keeps the nearest depth even once it has left the short history."""
    pairing = DepthPairing(history=2)
    pairing.set_camera_info(info_msg())
    pairing.note_colour(1000 * MS)
    pairing.claim(1000 * MS)  # the worker was idle and took the frame at once
    pairing.add_depth(depth_msg(1000 * MS + 3 * MS))  # the matching depth, a little late
    for later_ms in (40, 80, 120):  # then the history moves on while the worker is busy
        pairing.add_depth(depth_msg(1000 * MS + later_ms * MS))
    found = pairing.take(1000 * MS, max_skew_s=0.02)
    assert found.reason == "" and found.depth.stamp_ns == 1003 * MS


def test_a_claimed_frame_keeps_its_depth_while_newer_colour_frames_arrive() -> None:
    """The worker segments frame A for seconds; B, C, D... replace each other in the slot meanwhile."""
    pairing = DepthPairing(history=2)
    pairing.set_camera_info(info_msg())
    pairing.add_depth(depth_msg(1000 * MS))
    pairing.note_colour(1000 * MS)
    pairing.claim(1000 * MS)
    for later in range(1, 20):
        pairing.add_depth(depth_msg((1000 + 250 * later) * MS))
        pairing.note_colour((1000 + 250 * later) * MS)
    found = pairing.take(1000 * MS, max_skew_s=0.01)
    assert found.reason == "" and found.depth.stamp_ns == 1000 * MS


def test_two_frames_of_one_camera_in_flight_each_keep_their_depth() -> None:
    """With several chips, a camera's frames A and B are segmented at once: each keeps the depth
    nearest it, though both left the short history before their answers."""
    pairing = DepthPairing(history=2)
    pairing.set_camera_info(info_msg())
    for colour_ms in (1000, 1100):
        pairing.add_depth(depth_msg(colour_ms * MS))
        pairing.note_colour(colour_ms * MS)
        pairing.claim(colour_ms * MS)  # another chip takes B while A is still in its engine
    for later_ms in (1400, 1500, 1600):
        pairing.add_depth(depth_msg(later_ms * MS))
    for colour_ms in (1100, 1000):  # answers in any order
        found = pairing.take(colour_ms * MS, max_skew_s=0.01)
        assert found.reason == "" and found.depth.stamp_ns == colour_ms * MS


def test_claims_never_taken_are_forgotten_beyond_a_bound() -> None:
    """A frame refused or failed in the engine is claimed and never taken: its claim must not stay."""
    pairing = DepthPairing()
    for index in range(10 * depth_pairing.CLAIMED_COLOUR_FRAMES):
        pairing.claim(index * MS)
    assert len(pairing._claimed) == depth_pairing.CLAIMED_COLOUR_FRAMES


def test_without_depth_or_camera_info_says_why() -> None:
    pairing = DepthPairing()
    assert pairing.take(5 * MS, 0.02).reason == "no depth frame received yet"
    pairing.add_depth(depth_msg(5 * MS))
    assert pairing.take(5 * MS, 0.02).reason == "no camera_info received yet"
    pairing.clear()
    assert pairing.take(5 * MS, 0.02).reason == "no depth frame received yet"


def one_instance_frame(pixels_fn) -> tuple[Header, SegmentationResult, np.ndarray]:
    """A result with one instance over a facing rectangle at 1 m, and its published labels."""
    frame = scene.render([[scene.facing_rectangle((0.0, 0.0, 1.0), 0.2, 0.1)]])
    rows, cols = np.nonzero(frame.labels)
    crop = frame.labels[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1] == 1
    instance = Instance(
        "box", 0, 0.8, (0.0, 0.0, 1.0, 1.0), crop, (int(rows.min()), int(cols.min())), frame.labels.shape
    )
    result = SegmentationResult(frame.labels.shape, ["box"], [instance], {"box": 0.9})
    header = Header(frame_id=FRAME)
    header.stamp.sec, header.stamp.nanosec = 0, 77 * MS
    return header, result, pixels_fn(frame)


def test_answer_measures_the_instance_and_labels_the_cloud() -> None:
    header, result, pixels = one_instance_frame(lambda f: f.depth_16uc1())
    labels = result.instance_mask()
    detections = messages.result_to_detections(result, header)
    pairing = depth_pairing.Pairing(depth_msg(77 * MS, pixels), info_msg())
    detections_3d, cloud = answer_messages(header, result, labels, detections, pairing, want_cloud=True)
    (detection,) = detections_3d.detections
    assert detections_3d.header == header and detection.id == "1"
    position = detection.bbox.center.position
    np.testing.assert_allclose((position.x, position.y, position.z), (0.0, 0.0, 1.0), atol=0.005)
    points = messages_3d.cloud_from_message(cloud)
    assert cloud.header == header
    assert len(points) == np.count_nonzero(labels[::4, ::4]) and set(points["instance"]) == {1}
    _, no_cloud = answer_messages(header, result, labels, detections, pairing, want_cloud=False)
    assert no_cloud is None


def test_with_track_ids_the_3d_detection_and_its_cloud_points_carry_the_track_id() -> None:
    header, result, pixels = one_instance_frame(lambda f: f.depth_16uc1())
    tracked = SegmentationResult(
        result.image_size, result.prompts, [result.instances[0].with_track_id(7)], result.presence
    )
    labels = tracked.instance_mask()  # mask value 1: the frame's first detection
    detections = messages.result_to_detections(tracked, header)
    pairing = depth_pairing.Pairing(depth_msg(77 * MS, pixels), info_msg())
    detections_3d, cloud = answer_messages(header, tracked, labels, detections, pairing, want_cloud=True)
    (detection,) = detections_3d.detections
    assert detection.id == detections.detections[0].id == "7"
    assert set(messages_3d.cloud_from_message(cloud)["instance"]) == {7}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d, i: setattr(d, "encoding", "mono8"), "unsupported depth encoding"),
        (lambda d, i: setattr(d, "data", bytes(d.data)[:100]), "truncated depth image"),
        (lambda d, i: setattr(d.header, "frame_id", "camera_depth_optical_frame"), "depth frame_id"),
        (lambda d, i: setattr(i, "k", [0.0] * 9), "focal lengths"),
        (lambda d, i: setattr(i, "width", 320), "camera_info is 320x480"),
    ],
)
def test_bad_depth_inputs_are_refused_with_the_reason(change, reason) -> None:
    header, result, pixels = one_instance_frame(lambda f: f.depth_32fc1())
    depth_image, camera_info = depth_image_msg(77 * MS, pixels), camera_info_msg()
    change(depth_image, camera_info)
    detections = messages.result_to_detections(result, header)
    pairing = depth_pairing.Pairing(
        messages_3d.depth_frame(depth_image), messages_3d.camera_info_data(camera_info)
    )
    with pytest.raises(InputError, match=reason):
        answer_messages(header, result, result.instance_mask(), detections, pairing, True)


def test_all_invalid_depth_gives_an_empty_answer() -> None:
    """NaN everywhere: an empty Detection3DArray and an empty cloud, not an error."""
    header, result, pixels = one_instance_frame(lambda f: np.full(f.labels.shape, np.nan, np.float32))
    detections = messages.result_to_detections(result, header)
    pairing = depth_pairing.Pairing(depth_msg(77 * MS, pixels), info_msg())
    detections_3d, cloud = answer_messages(header, result, result.instance_mask(), detections, pairing, True)
    assert detections_3d.detections == [] and cloud.width == 0


def test_depth_status_counts_and_warns() -> None:
    stats = DepthStats()
    assert depth_status("sam3", stats.snapshot()).level == DiagnosticStatus.OK
    stats.count_depth()
    stats.count_camera_info()
    stats.count_3d()
    stats.count_without_depth("nearest depth frame is 50.0 ms from the colour frame")
    status = depth_status("sam3", stats.snapshot())
    values = {kv.key: kv.value for kv in status.values}
    assert status.name == "sam3: depth" and status.level == DiagnosticStatus.WARN
    assert values["frames_3d"] == "1" and values["frames_without_depth"] == "1"
    assert values["depth_received"] == "1" and values["camera_info_received"] == "1"
    stats.count_rejected("depth refused: unsupported depth encoding 'mono16'")
    values = {kv.key: kv.value for kv in depth_status("sam3", stats.snapshot()).values}
    assert values["depth_rejected"] == "1" and "mono16" in values["last_error"]
    stats.count_3d()
    assert depth_status("sam3", stats.snapshot()).level == DiagnosticStatus.OK
