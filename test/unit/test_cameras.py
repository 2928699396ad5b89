"""The ``cameras`` parameter's rules and the per-camera /diagnostics status, without a ROS graph."""

from __future__ import annotations

import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from hypothesis import given
from hypothesis import strategies as st
from rclpy.parameter import Parameter

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.settings import CAMERA_NAME, MAX_CAMERAS, camera_names, invalid_values
from tt_sam3_ros.engines import CHECKED_STAGES
from tt_sam3_ros.ros.diagnostics import NodeView, camera_status, segmentation_status
from tt_sam3_ros.ros.parameters import PARAMETERS, READ_AT_CONFIGURE
from tt_sam3_ros.runtime.worker import FrameStats


def _defaults() -> dict[str, object]:
    return {
        name: (None if isinstance(default, Parameter.Type) else default)
        for name, (default, _) in PARAMETERS.items()
    }


def test_cameras_is_read_at_configure_and_unset_by_default() -> None:
    assert "cameras" in READ_AT_CONFIGURE
    assert camera_names(None) == () and camera_names([]) == ()
    assert camera_names(["front", "left_2"]) == ("front", "left_2")


@pytest.mark.parametrize(
    ("cameras", "reason"),
    [
        (["front", "front"], "'front' is named twice"),
        (["front/left"], "'front/left' is not a camera name"),
        (["2nd"], "'2nd' is not a camera name"),
        ([""], "'' is not a camera name"),
        ([f"c{k}" for k in range(MAX_CAMERAS + 1)], f"at most {MAX_CAMERAS} cameras"),
    ],
)
def test_unusable_cameras_are_refused_with_the_reason(cameras: list[str], reason: str) -> None:
    assert reason in invalid_values({**_defaults(), "cameras": cameras})


@given(st.lists(st.text(max_size=80), max_size=MAX_CAMERAS + 2))
def test_any_cameras_value_is_accepted_as_topic_tokens_or_refused_on_one_line(cameras: list[str]) -> None:
    """Untrusted text: accepted names are ROS name tokens; a refusal quotes, never echoes raw text."""
    try:
        names = camera_names(cameras)
    except InputError as error:
        assert "\n" not in str(error) and "\x1b" not in str(error)
        assert invalid_values({**_defaults(), "cameras": cameras}) == str(error)
        return
    assert names == tuple(cameras) and len(set(names)) == len(names) <= MAX_CAMERAS
    assert all(CAMERA_NAME.fullmatch(name) for name in names)


VIEW = NodeView("sam3", "active", "torch", "cpu", "float32", "tiny-random", ("car",))


def test_a_camera_status_reports_that_cameras_frames_and_level() -> None:
    stats = FrameStats()
    for _ in range(3):
        stats.count_received()
    stats.count_processed(12.0, 40.0)
    stats.count_dropped()
    stats.count_rejected("bad input frame (left_optical): unsupported encoding 'x'")
    status = camera_status(VIEW, "left", stats.snapshot())
    values = {kv.key: kv.value for kv in status.values}
    assert status.name == "sam3: camera left"
    assert status.level == DiagnosticStatus.WARN  # its last frame was refused
    assert values["camera"] == "left"
    assert (values["frames_received"], values["frames_processed"]) == ("3", "1")
    assert (values["frames_dropped"], values["frames_rejected"]) == ("1", "1")
    assert values["output_age_ms_p50"] == "40.0" and values["processing_ms_p90"] == "12.0"
    stats.count_processed(10.0, 30.0)
    assert camera_status(VIEW, "left", stats.snapshot()).level == DiagnosticStatus.OK


def test_the_segmentation_status_says_which_prompt_path_serves_and_why() -> None:
    """The ttnn engine's warm-up verdicts (how frames go up, which form of each risky stage and
    which prompt path serve) are values of the engine's status; an engine that has none (torch)
    adds no such values."""
    reason = "host (auto: the chip prompt path failed its warm-up check: mask logits PCC 0.4213 < 0.99)"
    upload = (
        "bfloat16 upload (warm-up check: the chip's uint8 cast 12 of 3048192 values wrong after the cast)"
    )
    convs = "taps form: pad, 9 slices, concat, matmul (warm-up check: ttnn.conv2d fpn.0: PCC 0.41 < 0.99)"
    topk = "ttnn.topk, 224 wide (warm-up check passed: indices exact)"
    ttnn_view = NodeView(
        "sam3",
        "active",
        "ttnn",
        "Blackhole p150a 0",
        "bfloat16",
        "sam3",
        ("car",),
        prompt_path=reason,
        input_path=upload,
        stage_checks=(("neck_convs", convs), ("topk", topk)),
    )
    values = {kv.key: kv.value for kv in segmentation_status(ttnn_view, FrameStats().snapshot()).values}
    assert values["prompt_path"] == reason and values["input"] == upload
    assert values["neck_convs"] == convs and values["topk"] == topk
    values = {kv.key: kv.value for kv in segmentation_status(VIEW, FrameStats().snapshot()).values}
    assert not {"prompt_path", "input", *CHECKED_STAGES} & set(values)
