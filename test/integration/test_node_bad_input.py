"""Bad input through real rclpy: every refused frame and parameter set leaves a working node.

One node process (tiny random SAM 3) takes 20 bad raw frames, then, on the compressed
transport, 10 bad compressed ones, and 15 bad parameter sets. After each: /diagnostics
counted the frame with a reason that is one printable line of bounded length, the log holds
no forged line, and the next good frame is answered. (SIGINT mid-stream, which ends a node,
is in test_node_startup.py with a node of its own.)
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from helpers.sam3_client import Sam3Client, log_tail, make_image, module_node, scene, stamp_now
from lifecycle_msgs.msg import Transition
from rcl_interfaces.msg import ParameterType
from sensor_msgs.msg import CompressedImage, Image

PROMPTS = ["car", "person"]
MAX_IMAGE_SIDE = 256
NODE_PARAMS = {
    "model_id": "tiny-random",
    "prompts": str(PROMPTS),
    "threshold": "0.0",
    "max_instances": "4",
    "max_image_side": str(MAX_IMAGE_SIDE),
}
#: A reason on /diagnostics may quote input, but never more than this (errors.quoted cuts at 64).
REASON_BOUND = 400
FORGED = "[FATAL] [sam3]: forged"


sam3 = module_node(NODE_PARAMS, "sam3_bad_input")


def _raw(width: int = 32, height: int = 24, encoding: str = "rgb8", frame_id: str = "cam") -> Image:
    msg = make_image(scene(seed=width * height, width=width, height=height))
    msg.encoding, msg.header.frame_id = encoding, frame_id
    return msg


def _with(msg: Image, **fields: object) -> Image:
    for name, value in fields.items():
        setattr(msg, name, value)
    return msg


def _bad_raw_frames() -> dict[str, Image]:
    good = _raw()
    return {
        "mono16": _with(_raw(), encoding="mono16", step=64),
        "16UC1": _with(_raw(), encoding="16UC1", step=64),
        "32FC1": _with(_raw(), encoding="32FC1", step=128),
        "bayer": _with(_raw(), encoding="bayer_rggb8", step=32),
        "yuv422": _with(_raw(), encoding="yuv422"),
        "no-encoding": _with(_raw(), encoding=""),
        "100KB-encoding": _with(_raw(), encoding="x" * 100_000),
        "forged-encoding": _with(_raw(), encoding="rgb8\n" + FORGED + "\x1b[2J"),
        "truncated": _with(_raw(), data=bytes(good.data)[:-10]),
        "no-data": _with(_raw(), data=b""),
        "width-0": _with(_raw(), width=0),
        "height-0": _with(_raw(), height=0),
        "step-too-small": _with(_raw(), step=31 * 3),
        "1x1": _raw(width=1, height=1),
        "1x64": _raw(width=1, height=64),
        "over-max-side": _raw(width=MAX_IMAGE_SIDE + 1, height=4),
        "declared-huge": _with(_raw(), width=100_000, height=100_000, step=300_000),
        "step-2^31": _with(_raw(), step=2**31),
        "100KB-frame-id": _with(_raw(encoding="nv12"), header=_header("f" * 100_000)),
        "forged-frame-id": _with(_raw(), data=b"\x00" * 7, header=_header("cam\n" + FORGED + "\r\x07")),
    }


def _header(frame_id: str):
    header = _raw().header
    header.frame_id = frame_id
    return header


def _compressed(data: bytes, fmt: str = "jpeg") -> CompressedImage:
    msg = CompressedImage(format=fmt, data=data)
    msg.header.frame_id = "cam"
    return msg


def _encoded(extension: str) -> bytes:
    ok, buffer = cv2.imencode(extension, scene(seed=3, width=64, height=48))
    assert ok
    return buffer.tobytes()


def _bad_compressed_frames() -> dict[str, CompressedImage]:
    jpeg, png = _encoded(".jpg"), _encoded(".png")
    # A PNG whose header declares 20000 x 20000 pixels (a decompression bomb's header).
    bomb = bytearray(png)
    bomb[16:24] = (20000).to_bytes(4, "big") * 2
    return {
        "random-bytes": _compressed(np.random.default_rng(0).bytes(4096)),
        "jpeg-header-then-zeros": _compressed(b"\xff\xd8\xff\xe0" + bytes(300)),
        "truncated-jpeg": _compressed(jpeg[: len(jpeg) // 2]),
        "truncated-png": _compressed(png[: len(png) // 2], "png"),
        "no-data": _compressed(b""),
        "png-signature-and-header-only": _compressed(png[:33], "png"),
        "100KB-format": _compressed(np.random.default_rng(1).bytes(512), "f" * 100_000),
        "forged-format": _compressed(b"\x89PNG", "png\n" + FORGED),
        "compressed-depth": _compressed(png, "16UC1; compressedDepth png"),
        "png-declaring-20000x20000": _compressed(bytes(bomb), "png"),
    }


def _reason_is_safe(text: str) -> None:
    assert len(text) < REASON_BOUND, f"{len(text)} characters: {text[:200]}..."
    assert text.isprintable(), repr(text[:300])


def _refused_then_served(
    sam3: Sam3Client, bad: Image | CompressedImage, good: object, before: dict[str, str]
) -> dict[str, str]:
    """Send `bad`, see it counted against `before` (a /diagnostics status published after every
    earlier frame was counted), see `good` answered; returns the status that counted `bad`: the
    next case's `before` (the good frame in between is neither rejected nor an engine error, or
    its answer would not come), which spares a wait for a fresh status (up to 1 s) per case."""
    bad_key = stamp_now(bad)
    sam3.send(bad)

    def counted(status: dict[str, str]) -> bool:
        return int(status["frames_rejected"]) == int(before["frames_rejected"]) + 1

    status = sam3.next_diagnostics(where=counted)
    assert status["last_error"].startswith("bad input frame"), status["last_error"]
    _reason_is_safe(status["last_error"])
    _reason_is_safe(status["_message"])
    assert status["engine_errors"] == before["engine_errors"], "a bad frame was blamed on the engine"
    detections, _ = sam3.ask(good)
    assert detections.header == good.header
    assert bad_key not in sam3.detections
    assert sam3.process.poll() is None, log_tail(sam3.log_path)
    return status


def test_twenty_bad_raw_frames_are_each_counted_and_the_next_frame_served(sam3: Sam3Client) -> None:
    before = sam3.next_diagnostics()
    for case, bad in _bad_raw_frames().items():
        try:
            before = _refused_then_served(sam3, bad, _raw(), before)
        except AssertionError as error:
            raise AssertionError(f"{case}: {error}") from error


def test_ten_bad_compressed_frames_are_each_counted_and_the_next_frame_served(sam3: Sam3Client) -> None:
    assert sam3.transition(Transition.TRANSITION_DEACTIVATE)
    assert sam3.set_parameter("transport", "compressed").successful
    assert sam3.transition(Transition.TRANSITION_ACTIVATE)
    sam3.wait_for_subscriber(compressed=True)
    before = sam3.next_diagnostics()
    try:
        for case, bad in _bad_compressed_frames().items():
            try:
                before = _refused_then_served(sam3, bad, _compressed(_encoded(".jpg")), before)
            except AssertionError as error:
                raise AssertionError(f"{case}: {error}") from error
    finally:
        assert sam3.transition(Transition.TRANSITION_DEACTIVATE)
        assert sam3.set_parameter("transport", "raw").successful
        assert sam3.transition(Transition.TRANSITION_ACTIVATE)
        sam3.wait_for_subscriber()


BAD_SETS = [
    ("prompts", "car", ParameterType.PARAMETER_STRING, "must be a list of strings, e.g."),
    ("prompts", [], ParameterType.PARAMETER_STRING_ARRAY, "must not be empty"),
    ("prompts", ["car", " "], ParameterType.PARAMETER_STRING_ARRAY, "prompt 1 is empty"),
    ("prompts", [f"p{i}" for i in range(17)], ParameterType.PARAMETER_STRING_ARRAY, "too many prompts"),
    ("prompts", ["x" * 100_000], ParameterType.PARAMETER_STRING_ARRAY, "at most 256"),
    ("prompts", [" car"], ParameterType.PARAMETER_STRING_ARRAY, "spaces around it"),
    ("prompts", ["car\n" + FORGED], ParameterType.PARAMETER_STRING_ARRAY, "control character"),
    ("threshold", "high", ParameterType.PARAMETER_STRING, "threshold must be a number, e.g. 0.5"),
    ("threshold", 1.5, ParameterType.PARAMETER_DOUBLE, "threshold out of range"),
    ("max_instances", 300, ParameterType.PARAMETER_INTEGER, "max_instances out of range"),
    ("max_instances", 2.5, ParameterType.PARAMETER_DOUBLE, "max_instances must be an integer, e.g. 50"),
    ("publish_overlay", "yes", ParameterType.PARAMETER_STRING, "publish_overlay must be true or false"),
    ("engine", "tpu", ParameterType.PARAMETER_STRING, "read at configure"),
    ("qos_depth", 0, ParameterType.PARAMETER_INTEGER, "qos_depth"),
    ("autostart", False, ParameterType.PARAMETER_BOOL, "read-only"),
]


def test_fifteen_bad_parameter_sets_are_refused_readably_and_change_nothing(sam3: Sam3Client) -> None:
    for name, value, type_, reason in BAD_SETS:
        before = sam3.get_parameter(name)
        result = sam3.set_parameter(name, value, type_)
        case = f"{name}={str(value)[:40]!r}"
        assert not result.successful, case
        assert reason in result.reason, (case, result.reason)
        _reason_is_safe(result.reason)
        assert sam3.get_parameter(name) == before, case
        detections, _ = sam3.ask(_raw())
        assert {sam3.prompt_of(d) for d in detections.detections} <= set(PROMPTS), case
    status = sam3.next_diagnostics()
    assert status["prompts"] == ", ".join(PROMPTS)
    assert status["_level"] == 0, status


def test_the_log_holds_no_forged_line(sam3: Sam3Client) -> None:
    lines = Path(sam3.log_path).read_text(errors="replace").splitlines()
    assert not [line for line in lines if line.startswith(FORGED)], "a message forged a log line"
    assert "\x1b" not in "".join(lines), "a raw terminal escape reached the log"
    assert max(len(line) for line in lines) < 2000
