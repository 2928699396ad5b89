"""The node with ``devices``: one engine per chip, a failed chip out of service while the others
serve, per-chip /diagnostics, and full service again at the next configure.

A real ``Sam3Node`` (real rclpy, its own context, sandboxed DDS) whose ``_build_segmenter``
hands out a scripted engine per chip, so a test can make one chip fail at start or on every
frame and read what a user reads: the lifecycle state and the /diagnostics statuses the node
publishes. The node over real chips' engines (the TT-NN emulator) is
test/integration/test_node_chips_emulated.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from scripted_segmenter import ScriptedSegmenter
from sensor_msgs.msg import Image

from tt_sam3_ros.core.results import SegmentationResult
from tt_sam3_ros.engines.base import EngineError
from tt_sam3_ros.ros.node import ENGINE_ERROR_LIMIT, Sam3Node

CAMERAS = ["front", "left", "right", "rear"]
#: A liveness bound for the worker threads, far above what a scripted frame takes.
LIMIT_S = 30.0


class Published:
    """Stands in for the /diagnostics publisher: keeps the last array."""

    def __init__(self) -> None:
        self.last: DiagnosticArray | None = None

    def publish(self, array: DiagnosticArray) -> None:
        self.last = array


@pytest.fixture
def nodes() -> Iterator[list[Sam3Node]]:
    made: list[Sam3Node] = []
    yield made
    for sam3 in made:
        sam3.shut_down()
        sam3.destroy_node()


def _node(
    context: rclpy.context.Context,
    nodes: list[Sam3Node],
    build: Callable[[str], ScriptedSegmenter],
    devices: object = ("0", "1"),
) -> Sam3Node:
    overrides = [
        Parameter("autostart", value=False),
        Parameter("model_id", value="tiny-random"),
        Parameter("engine", value="ttnn"),
        Parameter("prompts", value=["car"]),
        Parameter("cameras", value=CAMERAS),
    ]
    if devices:
        written = devices if isinstance(devices, str) else list(devices)
        overrides.append(Parameter("devices", value=written))
    sam3 = Sam3Node(context=context, parameter_overrides=overrides)
    nodes.append(sam3)
    sam3._build_segmenter = lambda request, device: build(device)
    sam3._diagnostics_pub = Published()
    return sam3


def _statuses(sam3: Sam3Node) -> dict[str, DiagnosticStatus]:
    """The statuses the node publishes on /diagnostics now, by name."""
    sam3._publish_diagnostics()
    return {status.name: status for status in sam3._diagnostics_pub.last.status}


def _values(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def _image(value: int = 0) -> Image:
    msg = Image(height=6, width=8, encoding="rgb8", step=24)
    msg.data = bytes([value]) * (6 * 8 * 3)
    msg.header.frame_id = "cam"
    return msg


def _send(sam3: Sam3Node, camera: str) -> None:
    sam3._on_image(sam3._cameras[camera], _image())


def _processed(sam3: Sam3Node, camera: str) -> int:
    return sam3._cameras[camera].state.stats.camera.snapshot().processed


def _wait(condition: Callable[[], bool]) -> bool:
    """Poll ``condition`` until true or LIMIT_S passed (a liveness bound, not a timing)."""
    pause = threading.Event()
    for _ in range(int(LIMIT_S / 0.01)):
        if condition():
            return True
        pause.wait(0.01)
    return condition()


def test_a_chip_that_fails_is_taken_out_of_service_the_others_serve_every_camera_and_configure_restores_it(
    context, nodes
) -> None:
    engines: dict[str, list[ScriptedSegmenter]] = {"0": [], "1": []}
    lost = RuntimeError("device lost: no reply from chip 1")

    def build(device: str) -> ScriptedSegmenter:
        failing = device == "1" and not engines["1"]  # the first engine of chip 1 only
        engines[device].append(ScriptedSegmenter(device, fail_with=lost if failing else None))
        return engines[device][-1]

    sam3 = _node(context, nodes, build)
    assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert sam3.trigger_activate() == TransitionCallbackReturn.SUCCESS
    statuses = _statuses(sam3)
    assert {"sam3: chip 0", "sam3: chip 1"} <= set(statuses)
    assert _values(statuses["sam3: segmentation"])["devices"] == "0, 1 (serving: 0, 1)"
    assert _values(statuses["sam3: chip 1"])["device"] == "scripted chip 1"
    failing = engines["1"][0]
    sent = 0
    while failing.closed == 0:
        sent += 1
        assert sent < 400, "chip 1 was never taken out of service"
        camera = CAMERAS[sent % len(CAMERAS)]
        before = (failing.calls, _processed(sam3, camera))
        _send(sam3, camera)
        assert _wait(lambda camera=camera, before=before: (failing.calls, _processed(sam3, camera)) != before)
    statuses = _statuses(sam3)
    chip_1 = statuses["sam3: chip 1"]
    assert chip_1.level == DiagnosticStatus.ERROR
    last = f"engine error: RuntimeError: {lost}"
    reason = f"{ENGINE_ERROR_LIMIT} frames in a row failed in the engine (last: {last})"
    assert chip_1.message == f"out of service: {reason}"
    assert _values(chip_1)["state"] == "out of service"
    assert _values(chip_1)["engine_errors"] == str(ENGINE_ERROR_LIMIT)
    assert statuses["sam3: chip 0"].level == DiagnosticStatus.OK
    assert _values(statuses["sam3: segmentation"])["devices"] == "0, 1 (serving: 0)"
    assert sam3._state == "active"
    for camera in CAMERAS:  # every camera is still served, on chip 0
        before = _processed(sam3, camera)
        _send(sam3, camera)
        assert _wait(lambda camera=camera, before=before: _processed(sam3, camera) > before), camera

    assert sam3.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
    assert sam3.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
    assert engines["0"][0].closed == 1 and failing.closed == 1
    assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS  # chip 1 is back
    assert sam3.trigger_activate() == TransitionCallbackReturn.SUCCESS
    statuses = _statuses(sam3)
    assert _values(statuses["sam3: segmentation"])["devices"] == "0, 1 (serving: 0, 1)"
    assert statuses["sam3: chip 1"].level == DiagnosticStatus.OK
    for sent in range(2 * len(CAMERAS)):
        camera = CAMERAS[sent % len(CAMERAS)]
        before = _processed(sam3, camera)
        _send(sam3, camera)
        assert _wait(lambda camera=camera, before=before: _processed(sam3, camera) > before)
    assert engines["1"][1].calls + engines["0"][1].calls == 2 * len(CAMERAS)


def test_the_last_chip_lost_takes_the_lifecycle_error_path(context, nodes) -> None:
    lost = RuntimeError("device lost")
    sam3 = _node(context, nodes, lambda device: ScriptedSegmenter(device, fail_with=lost), devices=["3"])
    assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert sam3.trigger_activate() == TransitionCallbackReturn.SUCCESS
    for sent in range(ENGINE_ERROR_LIMIT):
        _send(sam3, "front")
        assert _wait(lambda sent=sent: sam3._state != "active" or _engine_errors(sam3) > sent)
    assert _wait(lambda: sam3._state == "unconfigured"), sam3._state
    values = _values(_statuses(sam3)["sam3: segmentation"])
    assert "the engine looks lost" in values["last_error"]


def _engine_errors(sam3: Sam3Node) -> int:
    return sam3._stats.snapshot().engine_errors


def test_a_chip_that_cannot_start_is_out_of_service_and_configure_succeeds_on_the_others(
    context, nodes
) -> None:
    def build(device: str) -> ScriptedSegmenter:
        if device == "1":
            raise EngineError("cannot open Blackhole chip 1: it is absent, or held by another process")
        return ScriptedSegmenter(device)

    sam3 = _node(context, nodes, build, devices=["0", "1", "2"])
    assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
    statuses = _statuses(sam3)
    chip_1 = statuses["sam3: chip 1"]
    assert chip_1.level == DiagnosticStatus.ERROR
    assert chip_1.message == (
        "out of service: cannot start: cannot open Blackhole chip 1: it is absent, or held by another process"
    )
    assert _values(statuses["sam3: segmentation"])["devices"] == "0, 1, 2 (serving: 0, 2)"


def test_configure_fails_when_no_chip_can_start(context, nodes) -> None:
    def build(device: str) -> ScriptedSegmenter:
        raise EngineError(f"cannot open Blackhole chip {device}")

    sam3 = _node(context, nodes, build)
    assert sam3.trigger_configure() == TransitionCallbackReturn.FAILURE
    assert sam3._state == "unconfigured"
    assert "cannot open Blackhole chip" in _values(_statuses(sam3)["sam3: segmentation"])["last_error"]


def test_all_opens_every_chip_ttnn_sees(context, nodes, monkeypatch) -> None:
    import tt_sam3_ros.ros.engine_ownership

    monkeypatch.setattr(tt_sam3_ros.ros.engine_ownership, "chip_count", lambda: 3)
    opened: list[str] = []

    def build(device: str) -> ScriptedSegmenter:
        opened.append(device)
        return ScriptedSegmenter(device)

    sam3 = _node(context, nodes, build, devices="all")
    assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert sorted(opened) == ["0", "1", "2"]
    assert {name for name in _statuses(sam3) if ": chip " in name} == {f"sam3: chip {k}" for k in range(3)}


def test_without_devices_there_is_one_engine_on_device_and_no_chip_status(context, nodes) -> None:
    opened: list[str] = []

    def build(device: str) -> ScriptedSegmenter:
        opened.append(device)
        return ScriptedSegmenter(device)

    sam3 = _node(context, nodes, build, devices=[])
    assert sam3.set_parameters([Parameter("device", value="2")])[0].successful
    assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert opened == ["2"]
    statuses = _statuses(sam3)
    assert not [name for name in statuses if ": chip " in name]
    assert "devices" not in _values(statuses["sam3: segmentation"])


class EmulatedChipSegmenter(ScriptedSegmenter):
    """A scripted segmenter on an emulated chip: every frame uploads to the chip first (a closed
    chip fails it), and close closes the chip, as the ttnn engine's close does."""

    def __init__(self, chip: str, device: Any, ttnn: Any, fail_with: Exception | None = None) -> None:
        super().__init__(chip, fail_with)
        self.device, self.ttnn = device, ttnn

    def __call__(self, rgb: np.ndarray, prompts: list[str], **kwargs: Any) -> SegmentationResult:
        import torch

        ttnn = self.ttnn
        ttnn.from_torch(
            torch.zeros(1, 1, 32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=self.device
        )
        return super().__call__(rgb, prompts, **kwargs)

    def close(self) -> None:
        super().close()
        self.ttnn.close_device(self.device)


@pytest.mark.parametrize("opened", ["together", "alone"])
def test_a_chip_out_of_service_closes_without_closing_the_others(context, nodes, monkeypatch, opened) -> None:
    """The node opens the chips ``devices`` names together (what ttnn needs for one chip to close
    alone): chip 1, failing every frame, is closed while chip 0 serves on. The negative control
    opens each chip on its own, chip 0 first: closing chip 1 then closes chip 0 too (ttnn's rule,
    which the emulator keeps) and chip 0's frames fail."""
    import sys

    import ttnn_emulator

    ttnn_emulator.reset()
    ttnn_emulator.SETTINGS.num_devices = 2
    monkeypatch.setitem(sys.modules, "ttnn", ttnn_emulator)  # what the node's chip set imports
    lost = RuntimeError("device lost")
    chip_0_open = threading.Event()
    sam3: Sam3Node | None = None

    def build(device: str) -> EmulatedChipSegmenter:
        assert sam3 is not None and sam3._chip_set is not None
        if opened == "together":
            chip, _ = sam3._chip_set.device(int(device))
        else:
            if device == "1":
                assert chip_0_open.wait(LIMIT_S)
            shape = ttnn_emulator.MeshShape(1, 1)
            chip = ttnn_emulator.open_mesh_device(
                shape, physical_device_ids=[int(device)], num_command_queues=2
            )
            chip_0_open.set()
        return EmulatedChipSegmenter(device, chip, ttnn_emulator, fail_with=lost if device == "1" else None)

    try:
        sam3 = _node(context, nodes, build)
        assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert sam3.trigger_activate() == TransitionCallbackReturn.SUCCESS
        sent = 0
        while _values(_statuses(sam3)["sam3: chip 1"])["state"] != "out of service":
            sent += 1
            assert sent < 400, "chip 1 was never taken out of service"
            camera = CAMERAS[sent % len(CAMERAS)]
            before = (_processed(sam3, camera), _engine_errors(sam3))
            _send(sam3, camera)
            assert _wait(
                lambda camera=camera, before=before: (
                    (_processed(sam3, camera), _engine_errors(sam3)) != before
                )
            )
        assert _wait(lambda: 1 not in ttnn_emulator._OPEN_DEVICES)  # chip 1's engine closed its chip
        errors = _engine_errors(sam3)
        for camera in CAMERAS:
            before = _processed(sam3, camera)
            _send(sam3, camera)
            assert _wait(
                lambda camera=camera, before=before: (
                    _processed(sam3, camera) > before or _engine_errors(sam3) > errors
                )
            )
        if opened == "together":
            assert _engine_errors(sam3) == errors and 0 in ttnn_emulator._OPEN_DEVICES  # chip 0 serves on
        else:
            assert (
                _engine_errors(sam3) > errors
                and "device 0 is closed" in _values(_statuses(sam3)["sam3: chip 0"])["last_error"]
            )
    finally:
        if sam3 is not None:
            sam3.shut_down()
        ttnn_emulator.reset()


def test_every_chips_segmenter_is_built_on_one_set_of_the_chips_named(context, nodes, monkeypatch) -> None:
    from tt_sam3_ros.core.segmenter import Sam3Segmenter

    built: list[dict[str, Any]] = []

    def from_pretrained(cls: type, **request: Any) -> ScriptedSegmenter:
        built.append(request)
        return ScriptedSegmenter(request["device"])

    monkeypatch.setattr(Sam3Segmenter, "from_pretrained", classmethod(from_pretrained))
    sam3 = _node(context, nodes, ScriptedSegmenter, devices=["2", "0"])
    del sam3._build_segmenter  # the node's own build, down to Sam3Segmenter.from_pretrained
    assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert sorted(request["device"] for request in built) == ["0", "2"]
    chip_sets = {id(request["chips"]) for request in built}
    assert len(chip_sets) == 1 and built[0]["chips"].device_ids == (2, 0)


def test_a_chip_whose_build_fails_before_taking_its_device_is_closed(context, nodes, monkeypatch) -> None:
    """Chips open together; chip 1's build fails before its engine takes its device (weights, say):
    the node closes that chip at configure, so the next configure can open it again."""
    import sys

    import ttnn_emulator

    ttnn_emulator.reset()
    ttnn_emulator.SETTINGS.num_devices = 2
    monkeypatch.setitem(sys.modules, "ttnn", ttnn_emulator)
    sam3: Sam3Node | None = None

    def build(device: str) -> EmulatedChipSegmenter:
        assert sam3 is not None and sam3._chip_set is not None
        if device == "1":
            raise EngineError("the weights cannot be had")
        chip, _ = sam3._chip_set.device(0)
        return EmulatedChipSegmenter(device, chip, ttnn_emulator)

    try:
        sam3 = _node(context, nodes, build)
        assert sam3.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert _values(_statuses(sam3)["sam3: chip 1"])["state"] == "out of service"
        assert sorted(ttnn_emulator._OPEN_DEVICES) == [0]  # chip 1 closed, chip 0 serving
        assert sam3.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
        assert not ttnn_emulator._OPEN_DEVICES
    finally:
        if sam3 is not None:
            sam3.shut_down()
        ttnn_emulator.reset()
