"""Depth and camera_info in, Detection3DArray and PointCloud2 out: every byte and every refusal."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("sensor_msgs.msg")
vision_msgs = pytest.importorskip("vision_msgs.msg")

from sensor_msgs.msg import CameraInfo, Image, PointCloud2, PointField  # noqa: E402
from std_msgs.msg import Header  # noqa: E402

from tt_sam3_ros.core import depth, depth_pairing  # noqa: E402
from tt_sam3_ros.core.errors import InputError  # noqa: E402
from tt_sam3_ros.core.results import Instance, SegmentationResult  # noqa: E402
from tt_sam3_ros.ros import messages, messages_3d  # noqa: E402


def header(frame_id: str = "camera_color_optical_frame", sec: int = 7, nanosec: int = 250) -> Header:
    msg = Header()
    msg.frame_id = frame_id
    msg.stamp.sec, msg.stamp.nanosec = sec, nanosec
    return msg


def depth_message(pixels: np.ndarray, encoding: str, pad: int = 0, big_endian: bool = False) -> Image:
    msg = Image()
    msg.header = header()
    msg.height, msg.width = pixels.shape
    msg.encoding = encoding
    msg.is_bigendian = int(big_endian)
    stored = pixels.astype(pixels.dtype.newbyteorder(">" if big_endian else "<"))
    rows = stored.view(np.uint8).reshape(pixels.shape[0], -1)
    padded = np.zeros((rows.shape[0], rows.shape[1] + pad), np.uint8)
    padded[:, : rows.shape[1]] = rows
    msg.step = padded.shape[1]
    msg.data = padded.tobytes()
    return msg


def camera_info(
    width: int = 64, height: int = 48, fx: float = 60.0, frame_id: str = "camera_color_optical_frame"
) -> CameraInfo:
    msg = CameraInfo()
    msg.header = header(frame_id)
    msg.width, msg.height = width, height
    msg.k = [fx, 0.0, (width - 1) / 2, 0.0, fx, (height - 1) / 2, 0.0, 0.0, 1.0]
    return msg


@pytest.mark.parametrize(
    ("encoding", "dtype"), [("16UC1", np.uint16), ("mono16", np.uint16), ("32FC1", np.float32)]
)
@pytest.mark.parametrize("pad", [0, 6])
@pytest.mark.parametrize("big_endian", [False, True])
def test_depth_message_to_array(encoding, dtype, pad, big_endian) -> None:
    pixels = (np.arange(48 * 64).reshape(48, 64) % 5000).astype(dtype)
    array = messages_3d.depth_to_array(depth_message(pixels, encoding, pad, big_endian))
    assert array.dtype == dtype and array.dtype.isnative
    np.testing.assert_array_equal(array, pixels)


def test_little_endian_depth_is_a_view_over_the_message() -> None:
    msg = depth_message(np.ones((4, 5), np.uint16), "16UC1")
    array = messages_3d.depth_to_array(msg)
    assert not array.flags.writeable
    assert np.shares_memory(array, np.frombuffer(msg.data, np.uint8))


@pytest.mark.parametrize("encoding", ["mono8", "16SC1", "32FC3", "rgb8", "", "bgr8\n16UC1"])
def test_other_depth_encodings_are_refused(encoding: str) -> None:
    msg = depth_message(np.ones((4, 5), np.uint16), encoding)
    with pytest.raises(
        InputError, match=r"unsupported depth encoding .*accepted: 16UC1, mono16, 32FC1"
    ) as caught:
        messages_3d.depth_to_array(msg)
    assert "\n" not in str(caught.value)


def test_truncated_and_malformed_depth_is_refused() -> None:
    msg = depth_message(np.ones((4, 5), np.uint16), "16UC1")
    msg.data = msg.data[:-1]
    with pytest.raises(InputError, match=r"truncated depth image: 39 bytes .* \(needs 40\)"):
        messages_3d.depth_to_array(msg)
    short_step = depth_message(np.ones((4, 5), np.float32), "32FC1")
    short_step.step = 19
    with pytest.raises(InputError, match="step 19"):
        messages_3d.depth_to_array(short_step)
    empty = depth_message(np.ones((4, 5), np.uint16), "16UC1")
    empty.width = 0
    with pytest.raises(InputError, match="empty depth image"):
        messages_3d.depth_to_array(empty)


@given(
    encoding=st.sampled_from(["16UC1", "32FC1", "16uc1", "mono16", "8UC1", "32FC1 "]),
    height=st.integers(0, 6),
    width=st.integers(0, 6),
    step=st.integers(0, 40),
    size=st.integers(0, 300),
    big_endian=st.booleans(),
)
def test_any_depth_message_is_read_or_refused_with_a_reason(
    encoding, height, width, step, size, big_endian
) -> None:
    msg = Image()
    msg.encoding, msg.height, msg.width, msg.step = encoding, height, width, step
    msg.is_bigendian = int(big_endian)
    msg.data = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    try:
        array = messages_3d.depth_to_array(msg)
    except InputError as error:
        assert str(error)
        return
    assert array.shape == (height, width) and array.dtype in (np.uint16, np.float32)


def test_camera_info_of_the_colour_image() -> None:
    camera = depth_pairing.camera_from_info(messages_3d.camera_info_data(camera_info()), (48, 64), (48, 64))
    np.testing.assert_allclose(camera.matrix, np.reshape(camera_info().k, (3, 3)))


def test_camera_info_of_the_depth_size_is_scaled_to_the_colour_grid() -> None:
    info = camera_info(width=32, height=24, fx=30.0)
    camera = depth_pairing.camera_from_info(messages_3d.camera_info_data(info), (48, 64), (24, 32))
    assert camera.size == (48, 64)
    np.testing.assert_allclose(camera.matrix, np.reshape(camera_info().k, (3, 3)))


@pytest.mark.parametrize(
    ("info", "reason"),
    [
        (camera_info(width=60), "camera_info is 60x48 but the colour image is 64x48 and the depth 64x48"),
        (camera_info(width=0, height=0), "camera_info is 0x0"),
        (camera_info(fx=0.0), "focal lengths"),
    ],
)
def test_bad_camera_info_is_refused(info: CameraInfo, reason: str) -> None:
    with pytest.raises(InputError, match=reason):
        depth_pairing.camera_from_info(messages_3d.camera_info_data(info), (48, 64), (48, 64))


def test_a_rectified_camera_info_gives_p_and_a_raw_one_k() -> None:
    info = camera_info()
    info.p = [55.0, 0.0, 30.0, 0.0, 0.0, 56.0, 22.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    camera = depth_pairing.camera_from_info(messages_3d.camera_info_data(info), (48, 64), (48, 64))
    np.testing.assert_allclose(camera.matrix, [[55.0, 0.0, 30.0], [0.0, 56.0, 22.0], [0.0, 0.0, 1.0]])
    info.p = [0.0] * 12
    camera = depth_pairing.camera_from_info(messages_3d.camera_info_data(info), (48, 64), (48, 64))
    np.testing.assert_allclose(camera.matrix, np.reshape(info.k, (3, 3)))


def test_a_right_stereo_p_binning_and_roi_are_refused_naming_them() -> None:
    right = camera_info()
    right.p = [55.0, 0.0, 30.0, -5.5, 0.0, 56.0, 22.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    with pytest.raises(InputError, match=r"P has Tx -5\.5"):
        depth_pairing.camera_from_info(messages_3d.camera_info_data(right), (48, 64), (48, 64))
    binned = camera_info()
    binned.binning_x = binned.binning_y = 2
    with pytest.raises(InputError, match="binning_x 2, binning_y 2"):
        depth_pairing.camera_from_info(messages_3d.camera_info_data(binned), (48, 64), (48, 64))
    cropped = camera_info()
    cropped.roi.x_offset, cropped.roi.width, cropped.roi.height = 8, 32, 24
    with pytest.raises(InputError, match="roi x_offset 8, y_offset 0, width 32, height 24"):
        depth_pairing.camera_from_info(messages_3d.camera_info_data(cropped), (48, 64), (48, 64))


def test_depth_or_camera_info_from_another_frame_is_refused() -> None:
    colour = header()
    good = depth_message(np.ones((4, 5), np.uint16), "16UC1")
    depth_pairing.check_frames(
        colour.frame_id, messages_3d.depth_frame(good), messages_3d.camera_info_data(camera_info())
    )
    other = depth_message(np.ones((4, 5), np.uint16), "16UC1")
    other.header.frame_id = "camera_depth_optical_frame\x1b[2J"
    with pytest.raises(
        InputError, match=r"depth frame_id 'camera_depth_optical_frame\\x1b\[2J' is not"
    ) as caught:
        depth_pairing.check_frames(
            colour.frame_id, messages_3d.depth_frame(other), messages_3d.camera_info_data(camera_info())
        )
    assert "\x1b" not in str(caught.value)
    with pytest.raises(InputError, match="camera_info frame_id 'left' is not"):
        depth_pairing.check_frames(
            colour.frame_id,
            messages_3d.depth_frame(good),
            messages_3d.camera_info_data(camera_info(frame_id="left")),
        )


def two_instance_result() -> SegmentationResult:
    def instance(prompt: str, index: int, score: float, row: int) -> Instance:
        crop = np.ones((4, 4), bool)
        return Instance(prompt, index, score, (0.0, float(row), 4.0, row + 4.0), crop, (row, 0), (16, 8))

    return SegmentationResult(
        (16, 8), ["cup", "bowl"], [instance("cup", 0, 0.9, 0), instance("bowl", 1, 0.6, 8)], {}
    )


def test_detections_3d_carry_the_2d_ids_hypotheses_and_header() -> None:
    stamp = header(sec=42, nanosec=17)
    detections_2d = messages.result_to_detections(two_instance_result(), stamp)
    geometries = [
        depth.InstanceGeometry(2, (0.1, -0.2, 1.5), (0.3, 0.2, 0.05), (0.12, -0.21, 1.49), 120)
    ]  # instance 1 had no depth
    msg = messages_3d.detections_3d(detections_2d, geometries, stamp)
    assert msg.header == stamp
    (detection,) = msg.detections
    assert detection.header == stamp
    assert detection.id == detections_2d.detections[1].id == "2"
    assert detection.results[0].hypothesis.class_id == "1"  # "bowl", class 1 in LabelInfo
    assert detection.results[0].hypothesis.score == pytest.approx(0.6)
    centre, size = detection.bbox.center, detection.bbox.size
    assert (centre.position.x, centre.position.y, centre.position.z) == pytest.approx((0.1, -0.2, 1.5))
    assert (centre.orientation.x, centre.orientation.y, centre.orientation.z, centre.orientation.w) == (
        0,
        0,
        0,
        1,
    )
    assert (size.x, size.y, size.z) == pytest.approx((0.3, 0.2, 0.05))
    # The hypothesis sits at the object's robust centroid (the median), not at the camera origin.
    pose = detection.results[0].pose.pose
    assert (pose.position.x, pose.position.y, pose.position.z) == pytest.approx((0.12, -0.21, 1.49))
    assert (pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w) == (0, 0, 0, 1)
    # Built fresh: the 2D message's own hypotheses are untouched and not shared.
    source = detections_2d.detections[1].results[0]
    assert source is not detection.results[0] and source.hypothesis is not detection.results[0].hypothesis
    assert source.pose.pose.position.z == 0.0
    source.hypothesis.score = 0.0
    assert detection.results[0].hypothesis.score == pytest.approx(0.6)


def test_point_cloud_layout() -> None:
    cloud = np.zeros(3, depth.POINT_DTYPE)
    cloud["x"], cloud["y"], cloud["z"] = [0.5, -0.25, 1.0], [0.0, 0.125, -1.0], [1.0, 2.0, 3.0]
    cloud["instance"] = [1, 2, 255]
    msg = messages_3d.cloud_to_message(cloud, header())
    assert isinstance(msg, PointCloud2)
    assert (msg.height, msg.width, msg.point_step, msg.row_step) == (1, 3, 16, 48)
    assert msg.is_dense and not msg.is_bigendian
    assert [(f.name, f.offset, f.datatype, f.count) for f in msg.fields] == [
        ("x", 0, PointField.FLOAT32, 1),
        ("y", 4, PointField.FLOAT32, 1),
        ("z", 8, PointField.FLOAT32, 1),
        ("instance", 12, PointField.UINT32, 1),
    ]
    raw = bytes(msg.data)
    assert raw[:16] == np.array([0.5, 0.0, 1.0], "<f4").tobytes() + np.array([1], "<u4").tobytes()
    back = messages_3d.cloud_from_message(msg)
    np.testing.assert_array_equal(back, cloud)


def test_empty_point_cloud() -> None:
    msg = messages_3d.cloud_to_message(np.zeros(0, depth.POINT_DTYPE), header())
    assert msg.width == 0 and msg.is_dense and len(messages_3d.cloud_from_message(msg)) == 0


def test_foreign_point_cloud_layout_is_refused() -> None:
    msg = messages_3d.cloud_to_message(np.zeros(2, depth.POINT_DTYPE), header())
    msg.fields = msg.fields[:3]
    with pytest.raises(InputError, match="x, y, z float32"):
        messages_3d.cloud_from_message(msg)


def test_depth_doc_reader_recovers_each_instance_from_the_cloud() -> None:
    """docs/depth.md's consumer snippet, run on a cloud we publish, gives back each instance's points."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "depth.md").read_text()
    (block,) = [
        b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL) if "def instance_points" in b
    ]
    namespace: dict = {}
    exec(compile(block, "docs/depth.md", "exec"), namespace)
    cloud = np.zeros(5, depth.POINT_DTYPE)
    cloud["x"], cloud["y"], cloud["z"] = np.arange(5), -np.arange(5), np.arange(5) + 1.0
    cloud["instance"] = [1, 2, 1, 3, 1]
    msg = messages_3d.cloud_to_message(cloud, header())
    detection = vision_msgs.Detection3D(id="1")
    np.testing.assert_array_equal(
        namespace["instance_points"](msg, detection), [[0, 0, 1], [2, -2, 3], [4, -4, 5]]
    )
