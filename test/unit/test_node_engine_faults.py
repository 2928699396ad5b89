"""The node's handling of engine faults and bad frames, with a scripted segmenter in this process.

A real ``Sam3Node`` (real rclpy, its own context, sandboxed DDS) whose ``_build_segmenter`` is
replaced by a stand-in, so a test can make warm-up fail, make the engine raise on a frame, or
send a frame the decoder refuses, and then read what a user would read: the lifecycle state,
the /diagnostics values and the log.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
import rclpy
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from scripted_segmenter import ScriptedSegmenter
from sensor_msgs.msg import Image

from tt_sam3_ros.ros.diagnostics import segmentation_status
from tt_sam3_ros.ros.node import ENGINE_ERROR_LIMIT, Sam3Node
from tt_sam3_ros.runtime.chips import Chip
from tt_sam3_ros.runtime.worker import Frame


def _node(context: rclpy.context.Context, segmenters: list[ScriptedSegmenter]) -> Sam3Node:
    """A node that builds the given segmenters in turn, one per configure."""
    overrides = [
        Parameter("autostart", value=False),
        Parameter("model_id", value="tiny-random"),
        Parameter("prompts", value=["car"]),
    ]
    sam3 = Sam3Node(context=context, parameter_overrides=overrides)
    queue = list(segmenters)
    sam3._build_segmenter = lambda request, device: queue.pop(0)
    return sam3


def _image(frame_id: str = "cam", encoding: str = "rgb8", width: int = 8, height: int = 6) -> Image:
    msg = Image(height=height, width=width, encoding=encoding, step=width * 3)
    msg.data = bytes(width * height * 3)
    msg.header.frame_id = frame_id
    return msg


def _status(sam3: Sam3Node):
    """The node's /diagnostics status about its engine and frames, as published."""
    return segmentation_status(sam3._node_view(), sam3._stats.snapshot())


def _wait(condition: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(condition())


def test_a_warmup_failure_releases_the_engine_and_a_second_configure_succeeds(context) -> None:
    failing, working = ScriptedSegmenter(fail_warmup=True), ScriptedSegmenter()
    sam3 = _node(context, [failing, working])
    try:
        assert sam3.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert failing.closed == 1, "the engine that failed its warm-up was never closed"
        assert _status(sam3).values[0].value == "unconfigured"
        assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert working.closed == 0
    finally:
        sam3.shut_down()
        sam3.destroy_node()
    assert working.closed == 1


def _handle(sam3: Sam3Node, segmenter: ScriptedSegmenter, msg: Image) -> dict[str, str]:
    sam3._handle_frame(segmenter, Frame(msg, time.monotonic()), Chip("default", ""), lambda: None)
    return {kv.key: kv.value for kv in _status(sam3).values}


def test_only_input_errors_count_as_bad_input(context) -> None:
    sam3 = _node(context, [])
    try:
        # A ValueError raised inside the engine (torch raises them) is an engine fault.
        engine_fault = ScriptedSegmenter(fail_with=ValueError("expected 4D input (got 3D input)"))
        values = _handle(sam3, engine_fault, _image())
        assert (values["frames_rejected"], values["engine_errors"]) == ("0", "1")
        assert "engine error: ValueError: expected 4D input" in values["last_error"]
        # A frame the decoder refuses is bad input, and the engine never sees it.
        healthy = ScriptedSegmenter()
        values = _handle(sam3, healthy, _image(encoding="yuv422"))
        assert (values["frames_rejected"], values["engine_errors"]) == ("1", "1")
        assert healthy.calls == 0
    finally:
        sam3.destroy_node()


@pytest.mark.parametrize(
    ("frame_id", "encoding"),
    [
        ("cam\n[FATAL] [sam3]: forged line\x1b[2J", "rgb8x"),
        ("cam", "x" * 100_000),
        ("f" * 100_000, "bayer_rggb99\r\n"),
    ],
    ids=["forged-frame-id", "huge-encoding", "huge-frame-id"],
)
def test_untrusted_text_in_the_reason_is_quoted_and_bounded(context, frame_id: str, encoding: str) -> None:
    sam3 = _node(context, [])
    try:
        values = _handle(sam3, ScriptedSegmenter(), _image(frame_id=frame_id, encoding=encoding))
        status = _status(sam3)
        assert values["frames_rejected"] == "1"
        for text in (values["last_error"], status.message):
            assert len(text) < 400, f"{len(text)} characters"
            assert text.isprintable(), repr(text[:200])
        assert "bad input frame" in values["last_error"]
    finally:
        sam3.destroy_node()


def test_a_run_of_engine_errors_takes_the_lifecycle_error_path(context) -> None:
    lost = ScriptedSegmenter(fail_with=RuntimeError("device lost: no response from the chip"))
    sam3 = _node(context, [lost])
    try:
        assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert sam3.trigger_activate() == TransitionCallbackReturn.SUCCESS
        for _ in range(ENGINE_ERROR_LIMIT):
            calls = lost.calls
            sam3._on_image(next(iter(sam3._cameras.values())), _image())
            assert _wait(lambda c=calls: lost.calls > c or sam3._state != "active")
        assert _wait(lambda: sam3._state == "unconfigured"), sam3._state
        assert lost.closed == 1, "the lost engine was not released"
        assert sam3._state_machine.current_state[1] == "unconfigured"
        assert lost.calls == ENGINE_ERROR_LIMIT
    finally:
        sam3.shut_down()
        sam3.destroy_node()


def test_library_log_lines_reach_the_node_logger(context, monkeypatch) -> None:
    import logging

    sam3 = _node(context, [])
    heard: list[tuple[str, str]] = []
    logger = sam3.get_logger()
    for level in ("info", "warning", "error"):

        def record(self: object, text: str, level: str = level, **_: object) -> None:
            heard.append((level, text))

        monkeypatch.setattr(type(logger), level, record)
    try:
        logging.getLogger("tt_sam3_ros.core.segmenter").warning("random weights loaded (%s)", "tiny-random")
        assert ("warning", "random weights loaded (tiny-random)") in heard
    finally:
        sam3.destroy_node()


def test_two_nodes_in_one_process_print_each_library_line_once(context, monkeypatch) -> None:
    """A library line reaches one node's logger, not every node's (it was printed once per node)."""
    import logging

    first = _node(context, [])
    second = Sam3Node(
        context=context,
        cli_args=["--ros-args", "-r", "__node:=sam3_second"],
        parameter_overrides=[Parameter("autostart", value=False), Parameter("model_id", value="tiny-random")],
    )
    heard: list[tuple[str, str]] = []

    def record(self: Any, text: str, **_: object) -> None:
        heard.append((self.name, text))

    monkeypatch.setattr(type(first.get_logger()), "warning", record)
    library = logging.getLogger("tt_sam3_ros.core.segmenter")
    try:
        library.warning("random weights loaded")
        assert heard == [("sam3", "random weights loaded")]
        first.destroy_node()
        library.warning("engine opened")
        assert heard[1:] == [("sam3_second", "engine opened")], "the second node lost the library's lines"
    finally:
        first.destroy_node()
        second.destroy_node()
    assert logging.getLogger("tt_sam3_ros").handlers == [], "the last node out left its handler attached"


def test_a_compressed_frame_is_held_to_the_configured_max_image_side(context) -> None:
    """max_image_side above the default applies to CompressedImage frames as to raw ones."""
    import cv2
    from sensor_msgs.msg import CompressedImage

    sam3 = _node(context, [])
    try:
        segmenter = ScriptedSegmenter()
        segmenter.max_image_side = 6000  # as Sam3Segmenter(max_image_side=6000) holds it
        ok, png = cv2.imencode(".png", np.zeros((4, 5000, 3), np.uint8))
        assert ok
        msg = CompressedImage(format="png", data=png.tobytes())
        values = _handle(sam3, segmenter, msg)
        assert (values["frames_rejected"], segmenter.calls) == ("0", 1), values["last_error"]
        segmenter.max_image_side = 4096
        values = _handle(sam3, segmenter, msg)
        assert values["frames_rejected"] == "1"
        assert "4096" in values["last_error"]
    finally:
        sam3.destroy_node()


def test_a_publisher_that_fails_is_an_output_error_and_the_healthy_engine_is_kept(context) -> None:
    healthy = ScriptedSegmenter()
    sam3 = _node(context, [healthy])
    try:
        assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert sam3.trigger_activate() == TransitionCallbackReturn.SUCCESS
        camera = next(iter(sam3._cameras.values()))

        def broken_publish(_msg: object) -> None:
            raise RuntimeError("forced publish failure")

        camera.detections_pub.publish = broken_publish
        for _ in range(ENGINE_ERROR_LIMIT + 1):
            calls = healthy.calls
            sam3._on_image(camera, _image())
            assert _wait(lambda c=calls: healthy.calls > c and _status(sam3).values[0].value == "active")
        failed = str(ENGINE_ERROR_LIMIT + 1)
        assert _wait(lambda: {kv.key: kv.value for kv in _status(sam3).values}.get("output_errors") == failed)
        values = {kv.key: kv.value for kv in _status(sam3).values}
        assert values["engine_errors"] == "0"
        assert values["last_error"] == "output error: RuntimeError: forced publish failure"
        assert sam3._state == "active" and healthy.closed == 0
    finally:
        sam3.shut_down()
        sam3.destroy_node()


def test_hints_name_the_node_by_its_real_name(context, monkeypatch) -> None:
    """Launched as /robot/segmenter, every command the node suggests must reach that node."""
    heard: list[str] = []
    overrides = [Parameter("autostart", value=False), Parameter("model_id", value="tiny-random")]
    sam3 = Sam3Node(
        context=context,
        namespace="robot",
        cli_args=["--ros-args", "-r", "__node:=segmenter"],
        parameter_overrides=overrides,
    )
    logger = sam3.get_logger()
    for level in ("warning", "fatal"):
        original = getattr(type(logger), level)

        def record(self: object, text: str, original: Any = original, **kwargs: object) -> Any:
            heard.append(text)
            return original(self, text, **kwargs)

        monkeypatch.setattr(type(logger), level, record)
    lost = ScriptedSegmenter(fail_with=RuntimeError("device lost"))
    sam3._build_segmenter = lambda request, device: lost
    try:
        assert sam3.get_fully_qualified_name() == "/robot/segmenter"
        assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert sam3.trigger_activate() == TransitionCallbackReturn.SUCCESS
        assert any("ros2 param set /robot/segmenter prompts" in line for line in heard), heard
        assert "ros2 param set /robot/segmenter prompts" in _status(sam3).message
        assert sam3.set_parameters([Parameter("prompts", value=["car"])])[0].successful
        for _ in range(ENGINE_ERROR_LIMIT):
            calls = lost.calls
            sam3._on_image(next(iter(sam3._cameras.values())), _image())
            assert _wait(lambda c=calls: lost.calls > c or sam3._state != "active")
        assert _wait(lambda: any("the engine looks lost" in line for line in heard))
        (fatal,) = [line for line in heard if "the engine looks lost" in line]
        assert "ros2 lifecycle set /robot/segmenter configure" in fatal
        assert not [line for line in heard if "/sam3" in line], heard
    finally:
        sam3.shut_down()
        sam3.destroy_node()


@pytest.mark.parametrize(
    ("error", "traceback_shown"),
    [
        ("engine", False),
        ("weights", False),
        ("parameter", False),
        ("unexpected", True),
    ],
)
def test_expected_configure_errors_give_their_reason_alone(
    context, capfd, error: str, traceback_shown: bool
) -> None:
    from tt_sam3_ros.engines.base import EngineError
    from tt_sam3_ros.weights import WeightsError

    def build(request: object, device: str) -> ScriptedSegmenter:
        raise {
            "engine": EngineError("the ttnn engine cannot be loaded: No module named 'ttnn'"),
            "weights": WeightsError("no weights for facebook/sam3 in the cache; set weights_dir"),
            "parameter": ValueError("max_prompts 20 is above 16"),
            "unexpected": KeyError("layers.3.weight"),
        }[error]

    sam3 = _node(context, [])
    sam3._build_segmenter = build
    try:
        assert sam3.trigger_configure() == TransitionCallbackReturn.FAILURE
        err = capfd.readouterr().err
        assert "cannot configure:" in err, err
        assert ("Traceback (most recent call last)" in err) == traceback_shown, err
    finally:
        sam3.destroy_node()


def test_an_engine_lost_while_a_deactivate_runs_is_still_released(context) -> None:
    """The last failing frame ends after the operator's deactivate: the error path then starts
    from inactive. It must still release the lost engine and leave the node unconfigured, as
    from active; it used to try a second deactivate, which rclpy refuses, and keep the engine."""
    gate = threading.Event()
    lost = ScriptedSegmenter(fail_with=RuntimeError("device lost: no response from the chip"), gate=gate)
    sam3 = _node(context, [lost])
    try:
        assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert sam3.trigger_activate() == TransitionCallbackReturn.SUCCESS
        camera = next(iter(sam3._cameras.values()))
        gate.set()
        for _ in range(ENGINE_ERROR_LIMIT - 1):
            calls = lost.calls
            sam3._on_image(camera, _image())
            assert _wait(lambda c=calls: lost.calls > c)
        gate.clear()
        lost.entered.clear()
        sam3._on_image(camera, _image())
        assert lost.entered.wait(10), "the last frame never reached the engine"
        assert sam3.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
        gate.set()  # the frame in flight fails: the engine is lost, the node already inactive
        assert _wait(lambda: lost.closed == 1), "the lost engine was not released"
        assert _wait(lambda: sam3._state_machine.current_state[1] == "unconfigured")
        assert sam3._state == "unconfigured"
        assert not sam3._engine_lost, "the next configure would find the engine still marked lost"
    finally:
        gate.set()
        sam3.shut_down()
        sam3.destroy_node()


def test_an_error_path_that_cannot_start_says_so_and_a_deactivate_releases(context, monkeypatch) -> None:
    """No thread can start for the lifecycle's error path (the process is out of threads): the
    node says what to do, and the operator's deactivate takes the error path itself (ERROR, the
    lost engine released, unconfigured)."""
    import tt_sam3_ros.ros.engine_ownership as engine_ownership

    class NoThread:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    errors: list[str] = []
    lost = ScriptedSegmenter(fail_with=RuntimeError("device lost"))
    sam3 = _node(context, [lost])
    logger = sam3.get_logger()
    original = type(logger).error

    def record(self: object, text: str, **kwargs: object) -> Any:
        errors.append(text)
        return original(self, text, **kwargs)

    monkeypatch.setattr(type(logger), "error", record)
    try:
        assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert sam3.trigger_activate() == TransitionCallbackReturn.SUCCESS
        monkeypatch.setattr(engine_ownership.threading, "Thread", NoThread)
        for _ in range(ENGINE_ERROR_LIMIT):
            calls = lost.calls
            sam3._on_image(next(iter(sam3._cameras.values())), _image())
            assert _wait(lambda c=calls: lost.calls > c)
        assert _wait(lambda: any("cannot take the error path (can't start new thread)" in e for e in errors))
        monkeypatch.undo()
        assert sam3.trigger_deactivate() == TransitionCallbackReturn.ERROR  # the engine is lost
        assert sam3._state_machine.current_state[1] == "unconfigured" and lost.closed == 1
    finally:
        sam3.shut_down()
        sam3.destroy_node()
