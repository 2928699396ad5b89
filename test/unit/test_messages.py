"""messages.py against hand-built messages: every encoding, row padding, bad buffers, outputs."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from tt_sam3_ros.core.results import Instance, SegmentationResult
from tt_sam3_ros.ros.messages import (
    compressed_to_rgb,
    image_to_rgb,
    instance_mask_to_image,
    label_info,
    result_to_detections,
    rgb_to_image,
)

# A 3x4 RGB picture in which every pixel and channel differs.
RGB = np.arange(3 * 4 * 3, dtype=np.uint8).reshape(3, 4, 3) * 7


def _image(pixels: np.ndarray, encoding: str, padding: int = 0) -> Image:
    """Hand-build an Image with ``padding`` junk bytes at the end of every row."""
    height, width = pixels.shape[:2]
    rows = pixels.reshape(height, -1)
    junk = np.full((height, padding), 0xEE, dtype=np.uint8)
    msg = Image()
    msg.height, msg.width, msg.encoding = height, width, encoding
    msg.step = rows.shape[1] + padding
    msg.data = np.concatenate([rows, junk], axis=1).tobytes()
    return msg


def _header() -> Header:
    header = Header(frame_id="camera_optical")
    header.stamp.sec, header.stamp.nanosec = 1700000000, 123456789
    return header


@pytest.mark.parametrize("padding", [0, 5])
@pytest.mark.parametrize(
    ("encoding", "stored"),
    [
        ("rgb8", RGB),
        ("bgr8", RGB[:, :, ::-1]),
        ("rgba8", np.dstack([RGB, np.full(RGB.shape[:2], 255, np.uint8)])),
        ("bgra8", np.dstack([RGB[:, :, ::-1], np.full(RGB.shape[:2], 9, np.uint8)])),
    ],
)
def test_colour_encodings_decode_to_rgb(encoding: str, stored: np.ndarray, padding: int) -> None:
    rgb = image_to_rgb(_image(np.ascontiguousarray(stored), encoding, padding))
    assert rgb.dtype == np.uint8
    assert rgb.shape == (3, 4, 3)
    np.testing.assert_array_equal(rgb, RGB)


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8", "mono8"])
def test_a_one_pixel_frame_decodes_in_every_encoding(encoding: str) -> None:
    # OpenCV 4.5.4 (Ubuntu 22.04's) refuses to convert a 1x1 array; the decode must not depend on it.
    pixel = np.uint8([[[10, 20, 30, 40]]])
    stored = {
        "rgb8": pixel[..., :3],
        "bgr8": pixel[..., 2::-1],
        "rgba8": pixel,
        "bgra8": pixel[..., [2, 1, 0, 3]],
    }
    want = np.uint8([[[10, 10, 10]]]) if encoding == "mono8" else pixel[..., :3]
    rgb = image_to_rgb(_image(np.ascontiguousarray(stored.get(encoding, pixel[..., :1])), encoding, 2))
    np.testing.assert_array_equal(rgb, want)


@pytest.mark.parametrize("padding", [0, 3])
def test_mono8_is_replicated_into_three_channels(padding: int) -> None:
    grey = RGB[:, :, 0]
    rgb = image_to_rgb(_image(grey, "mono8", padding))
    np.testing.assert_array_equal(rgb, np.dstack([grey, grey, grey]))


@pytest.mark.parametrize("padding", [0, 6])
def test_rgb8_is_a_read_only_view_over_the_message_buffer(padding: int) -> None:
    msg = _image(RGB, "rgb8", padding)
    rgb = image_to_rgb(msg)
    assert not rgb.flags.writeable
    assert np.shares_memory(rgb, np.frombuffer(msg.data, dtype=np.uint8))


def test_encoding_names_are_matched_case_insensitively() -> None:
    np.testing.assert_array_equal(image_to_rgb(_image(RGB, "RGB8")), RGB)


def test_last_row_without_padding_is_accepted() -> None:
    # Some drivers send step * (height - 1) + width * channels bytes.
    msg = _image(RGB, "rgb8", padding=4)
    msg.data = bytes(msg.data)[:-4]
    np.testing.assert_array_equal(image_to_rgb(msg), RGB)


@pytest.mark.parametrize(
    ("encoding", "reason"),
    [
        ("mono16", "16-bit"),
        ("16UC1", "16-bit depth"),
        ("32FC1", "float depth"),
        ("yuv422", "unsupported image encoding 'yuv422'"),
        ("bayer_rggb8", "accepted: rgb8, bgr8, rgba8, bgra8, mono8"),
        ("", "unsupported image encoding ''"),
    ],
)
def test_other_encodings_are_rejected_with_a_reason(encoding: str, reason: str) -> None:
    msg = _image(np.zeros((2, 2, 2), np.uint8), encoding)
    with pytest.raises(ValueError, match=reason):
        image_to_rgb(msg)


def test_truncated_buffer_is_rejected() -> None:
    msg = _image(RGB, "rgb8")
    msg.data = bytes(msg.data)[:-1]
    with pytest.raises(ValueError, match=r"truncated image: 35 bytes .* \(needs 36\)"):
        image_to_rgb(msg)


@pytest.mark.parametrize(("width", "height"), [(0, 3), (4, 0), (0, 0)])
def test_zero_width_or_height_is_rejected(width: int, height: int) -> None:
    msg = _image(RGB, "rgb8")
    msg.width, msg.height = width, height
    with pytest.raises(ValueError, match="empty image"):
        image_to_rgb(msg)


def test_step_shorter_than_a_row_is_rejected() -> None:
    msg = _image(RGB, "rgb8")
    msg.step = 11
    with pytest.raises(ValueError, match="step 11 is shorter than one row"):
        image_to_rgb(msg)


def _compressed(extension: str, pixels_rgb: np.ndarray, fmt: str) -> CompressedImage:
    ok, encoded = cv2.imencode(extension, cv2.cvtColor(pixels_rgb, cv2.COLOR_RGB2BGR))
    assert ok
    msg = CompressedImage(format=fmt)
    msg.data = encoded.tobytes()
    return msg


def test_png_decodes_losslessly_to_rgb() -> None:
    np.testing.assert_array_equal(compressed_to_rgb(_compressed(".png", RGB, "png")), RGB)


def test_jpeg_decodes_to_rgb_in_the_right_channel_order() -> None:
    # JPEG is lossy: use flat colour blocks, which it keeps within a few levels.
    # Chroma is subsampled, so compare block interiors, away from the colour edge.
    red_blue = np.zeros((16, 32, 3), np.uint8)
    red_blue[:, :16, 0] = 250
    red_blue[:, 16:, 2] = 250
    rgb = compressed_to_rgb(_compressed(".jpg", red_blue, "bgr8; jpeg compressed bgr8"))
    assert rgb.shape == (16, 32, 3)
    interior = np.r_[2:12, 20:30]
    assert np.abs(rgb[:, interior].astype(int) - red_blue[:, interior]).max() <= 12


def test_corrupt_jpeg_is_rejected() -> None:
    msg = CompressedImage(format="jpeg")
    msg.data = b"\xff\xd8\xff\xe0" + bytes(200)
    with pytest.raises(ValueError, match="corrupt compressed image"):
        compressed_to_rgb(msg)


@pytest.mark.parametrize("kept", [0.5, 0.99])
def test_a_jpeg_cut_short_is_refused_whatever_opencv_would_make_of_it(kept: float) -> None:
    # OpenCV 4.6 (Ubuntu 24.04's) decodes a truncated JPEG into grey rows with only a warning.
    msg = _compressed(".jpg", RGB, "jpeg")
    whole = bytes(msg.data)
    msg.data = whole[: int(kept * len(whole))]
    with pytest.raises(ValueError, match="the JPEG ends before its end-of-image marker"):
        compressed_to_rgb(msg)
    msg.data = whole + bytes(64)  # zero padding after the end marker, as some drivers send
    assert compressed_to_rgb(msg).shape == RGB.shape


@pytest.mark.parametrize("extension", [".png", ".jpg"])
def test_compressed_side_limit_is_the_callers_and_checked_from_the_header(extension: str) -> None:
    msg = _compressed(extension, np.zeros((8, 300, 3), np.uint8), "png")
    with pytest.raises(ValueError, match="declares 300x8 pixels; the largest side allowed is 256"):
        compressed_to_rgb(msg, max_side=256)
    assert compressed_to_rgb(msg, max_side=300).shape == (8, 300, 3)


@pytest.mark.parametrize(
    ("fmt", "data", "reason"),
    [
        ("jpeg", b"GIF89a......", "neither JPEG nor PNG"),
        ("jpeg", b"", "neither JPEG nor PNG"),
        ("16UC1; compressedDepth png", b"\x89PNG\r\n\x1a\n", "compressedDepth"),
    ],
)
def test_other_payloads_are_rejected(fmt: str, data: bytes, reason: str) -> None:
    msg = CompressedImage(format=fmt)
    msg.data = data
    with pytest.raises(ValueError, match=reason):
        compressed_to_rgb(msg)


def test_rgb_to_image_round_trips_with_header() -> None:
    header = _header()
    msg = rgb_to_image(RGB, header)
    assert (msg.encoding, msg.height, msg.width, msg.step) == ("rgb8", 3, 4, 12)
    assert msg.header == header
    np.testing.assert_array_equal(image_to_rgb(msg), RGB)


def _instance(prompt: str, index: int, score: float, box: tuple, origin: tuple, crop: np.ndarray) -> Instance:
    return Instance(prompt, index, score, box, crop, origin, image_size=(6, 8))


def _result() -> SegmentationResult:
    big = _instance("car", 0, 0.9, (1.0, 1.0, 5.0, 4.0), (1, 1), np.ones((3, 4), bool))
    small = _instance("person", 1, 0.6, (5.0, 4.0, 8.0, 6.0), (4, 5), np.ones((2, 3), bool))
    return SegmentationResult((6, 8), ["car", "person"], [big, small], {"car": 0.95, "person": 0.7})


def test_detections_follow_mask_ids_with_prompt_score_and_source_pixel_boxes() -> None:
    header = _header()
    msg = result_to_detections(_result(), header)
    assert msg.header == header
    assert [d.id for d in msg.detections] == ["1", "2"]
    first, second = msg.detections
    assert first.header == header
    assert first.results[0].hypothesis.class_id == "0"  # LabelInfo: 0 is "car"
    assert first.results[0].hypothesis.score == pytest.approx(0.9)
    assert (first.bbox.center.position.x, first.bbox.center.position.y) == (3.0, 2.5)
    assert (first.bbox.size_x, first.bbox.size_y) == (4.0, 3.0)
    assert second.results[0].hypothesis.class_id == "1"
    assert (second.bbox.center.position.x, second.bbox.center.position.y) == (6.5, 5.0)
    assert (second.bbox.size_x, second.bbox.size_y) == (3.0, 2.0)


def test_empty_result_gives_an_empty_array_with_the_header() -> None:
    msg = result_to_detections(SegmentationResult((6, 8), ["car"], [], {"car": 0.1}), _header())
    assert msg.detections == []
    assert msg.header == _header()


def test_detections_stop_at_the_255_ids_a_mono8_mask_holds() -> None:
    crop = np.ones((1, 1), bool)
    instances = [_instance("dot", 0, 1.0 - i / 1000, (0.0, 0.0, 1.0, 1.0), (0, 0), crop) for i in range(300)]
    msg = result_to_detections(SegmentationResult((6, 8), ["dot"], instances, {"dot": 1.0}), _header())
    assert len(msg.detections) == 255
    assert msg.detections[-1].id == "255"


def test_instance_mask_image_carries_ids_and_header() -> None:
    labels = _result().instance_mask()
    msg = instance_mask_to_image(labels, _header())
    assert (msg.encoding, msg.height, msg.width, msg.step) == ("mono8", 6, 8, 8)
    assert msg.header == _header()
    decoded = np.frombuffer(bytes(msg.data), np.uint8).reshape(6, 8)
    np.testing.assert_array_equal(decoded, labels)
    assert set(np.unique(decoded)) == {0, 1, 2}


def test_label_info_maps_index_to_prompt() -> None:
    msg = label_info(["car", "person"], 0.4, _header())
    assert [(c.class_id, c.class_name) for c in msg.class_map] == [(0, "car"), (1, "person")]
    assert msg.threshold == pytest.approx(0.4)
    assert msg.header == _header()


@pytest.mark.parametrize("bad", [np.zeros((2, 2), np.uint8), np.zeros((2, 2, 3), np.float32)])
def test_rgb_to_image_refuses_non_rgb_arrays(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="expected uint8"):
        rgb_to_image(bad, _header())
