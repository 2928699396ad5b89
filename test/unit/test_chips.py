"""Several chips behind one pipeline, without ROS: frames dealt to whichever chip is free, each
camera's outputs in order and its tracks kept across chips, a failed chip out of service while
the others serve every camera.

Real worker threads and the real ``FramePipeline``; the engines are stand-ins a test can hold
in the middle of a frame (an Event), so "two frames of one camera on two chips at once" is
arranged, not hoped for. Every wait is on a condition with a generous limit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from tt_sam3_ros.core.results import Instance, SegmentationResult
from tt_sam3_ros.core.settings import RunSettings
from tt_sam3_ros.engines.base import EngineError
from tt_sam3_ros.runtime.chips import OUT_OF_SERVICE, RELEASED, SERVING, Chip, ChipPool, Watchdog
from tt_sam3_ros.runtime.pipeline import ENGINE_ERROR_LIMIT, FrameInput, FrameOutput, FramePipeline, Wants
from tt_sam3_ros.runtime.worker import Frame, FrameSlot

CAMERAS = ("front", "left", "right", "rear")
SETTINGS = RunSettings(prompts=("box",), class_ids=(("box", 0),))
#: A liveness bound for thread hand-offs, far above what any of them takes.
LIMIT_S = 30.0
S = 1_000_000_000


class Engine:
    """A stand-in segmenter: one box that moves 1 px a frame (so a tracker follows it by IoU).

    ``hold`` (a stamp) makes the frame with that stamp wait in the engine until ``release``;
    ``fail_with`` makes every frame fail. Records whether it was closed.
    """

    max_image_side = 4096

    def __init__(self, fail_with: Exception | None = None, hold: int | None = None) -> None:
        self.fail_with = fail_with
        self.hold = hold
        self.holding = threading.Event()
        self.release = threading.Event()
        self.closed = 0

    def describe(self) -> dict[str, str]:
        return {"engine": "stand-in", "device": "none", "dtype": "none"}

    def warmup(self) -> None:
        pass

    def close(self) -> None:
        self.closed += 1

    def __call__(self, rgb: np.ndarray, prompts: list[str], **_: Any) -> SegmentationResult:
        step = int(rgb[0, 0, 0])
        if self.hold is not None and step == self.hold:
            self.holding.set()
            assert self.release.wait(LIMIT_S)
        if self.fail_with is not None:
            raise self.fail_with
        left = step % 30
        mask = np.ones((20, 20), bool)
        instance = Instance("box", 0, 0.9, (left, 10, left + 20, 30), mask, (10, left), (64, 96))
        return SegmentationResult((64, 96), list(prompts), [instance], {"box": 0.9})


class Published:
    """One camera's published frames, in the order they went out: (step, detection ids)."""

    def __init__(self) -> None:
        self.published: list[tuple[int, list[int]]] = []
        self.changed = threading.Condition()

    def add(self, step: int, ids: list[int]) -> None:
        with self.changed:
            self.published.append((step, ids))
            self.changed.notify_all()

    def wait_for(self, count: int) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: len(self.published) >= count, LIMIT_S)


class Outputs:
    """One frame's outputs (the node makes one per frame, for its header): into its camera's list."""

    depth = False

    def __init__(self, sink: Published, step: int) -> None:
        self._sink = sink
        self._step = step

    def wants(self) -> Wants:
        return Wants()

    def publish(self, output: FrameOutput) -> None:
        self._sink.add(self._step, output.result.detection_ids())

    def publish_3d(self, answer: Any) -> None:
        raise AssertionError("no 3D here")


class Rig:
    """A ChipPool over ``engines`` (one per chip, named '0', '1', ...) serving ``CAMERAS``."""

    def __init__(
        self, engines: dict[str, Engine | Exception], watchdog: Watchdog | None = None, build_s: float = 0.0
    ) -> None:
        self.build_s = build_s
        self.pipeline = FramePipeline(now_ns=lambda: 0)
        self.cameras = self.pipeline.make_cameras(CAMERAS)
        self.outputs = {camera: Published() for camera in CAMERAS}
        self.finished: set[tuple[str, int]] = set()
        self.slot = FrameSlot(CAMERAS)
        self.engines = engines
        self.lost: list[str] = []
        self.served_by: dict[tuple[str, int], str] = {}
        self.wait_turn_called = threading.Event()
        self.pool = ChipPool(
            [(name, name) for name in engines],
            self._build,
            self._handle,
            self.slot,
            logger=_Logger(),
            on_lost=lambda chip: self.lost.append(chip.name),
            watchdog=watchdog,
        )

    def _build(self, device: str) -> Engine:
        engine = self.engines[device]
        threading.Event().wait(self.build_s)  # a start-up that takes time (weights, warm-up)
        if isinstance(engine, Exception):
            raise engine
        return engine

    def _handle(self, engine: Engine, frame: Frame, chip: Chip, wait_turn: Callable[[], None]) -> str:
        step = frame.msg

        def turn() -> None:
            self.wait_turn_called.set()
            wait_turn()

        def decode(_max_side: int, step: int = step) -> np.ndarray:
            return np.full((64, 96, 3), step, np.uint8)  # the stand-in engine reads the step back

        self.served_by[(frame.camera, step)] = chip.name
        report = self.pipeline.process(
            engine,
            self.cameras[frame.camera],
            FrameInput(decode, stamp_ns=step * S // 10, received_s=step / 10, camera=frame.camera),
            SETTINGS,
            Outputs(self.outputs[frame.camera], step),
            chip=chip.stats,
            wait_turn=turn,
        )
        self.finished.add((frame.camera, step))
        return report.reason if report.engine_lost else ""

    def send(self, camera: str, step: int) -> None:
        self.slot.put(Frame(msg=step, received_s=float(step), camera=camera))

    def chip(self, name: str) -> Chip:
        return next(chip for chip in self.pool.chips if chip.name == name)


class _Logger:
    def error(self, message: str) -> None:
        raise AssertionError(message)


@pytest.fixture
def rigs() -> Iterator[list[Rig]]:
    """Rigs made by a test; each is stopped and joined afterwards, whatever happened."""
    made: list[Rig] = []
    yield made
    for rig in made:
        for engine in rig.engines.values():
            if isinstance(engine, Engine):
                engine.release.set()
        rig.pool.stop()
        rig.pool.join()


def _started(rigs: list[Rig], engines: dict[str, Engine | Exception], **options: Any) -> Rig:
    rig = Rig(engines, **options)
    rigs.append(rig)
    rig.pool.start()
    assert rig.pool.wait_ready(LIMIT_S)
    rig.pool.settle()
    return rig


def test_a_free_chip_serves_every_camera_while_the_other_is_busy(rigs: list[Rig]) -> None:
    engines = {"0": Engine(hold=1), "1": Engine(hold=1)}
    rig = _started(rigs, engines)
    rig.send("front", 1)  # held in the engine of whichever chip took it
    assert _wait(lambda: any(engine.holding.is_set() for engine in engines.values()))
    busy = next(name for name, engine in engines.items() if engine.holding.is_set())
    free = "1" if busy == "0" else "0"
    for camera in CAMERAS[1:]:
        rig.send(camera, 5)
        assert rig.outputs[camera].wait_for(1), f"{camera} was not served while chip {busy} was busy"
        assert rig.served_by[(camera, 5)] == free
    engines[busy].release.set()
    assert rig.outputs["front"].wait_for(1)
    assert rig.served_by[("front", 1)] == busy
    served = {chip.name: chip.stats.snapshot().processed for chip in rig.pool.chips}
    assert served == {busy: 1, free: 3}
    assert rig.pipeline.engine_stats.snapshot().processed == 4


def test_a_cameras_outputs_leave_in_order_and_keep_its_track_when_its_frames_run_on_two_chips(
    rigs: list[Rig],
) -> None:
    first, second = Engine(hold=1), Engine(hold=1)
    rig = _started(rigs, {"0": first, "1": second})
    rig.send("front", 1)  # held in whichever chip's engine took it
    assert _wait(lambda: first.holding.is_set() or second.holding.is_set())
    rig.send("front", 2)  # the other chip takes it: it answers first, then waits its turn
    assert rig.wait_turn_called.wait(LIMIT_S)
    assert _wait(lambda: len(rig.served_by) == 2)
    assert rig.outputs["front"].published == [], "frame 2 went out before frame 1"
    first.release.set()
    second.release.set()
    assert rig.outputs["front"].wait_for(2)
    (stamp_1, ids_1), (stamp_2, ids_2) = rig.outputs["front"].published
    assert (stamp_1, stamp_2) == (1, 2), "a camera's outputs leave in the order its frames were taken"
    assert ids_1 == ids_2 and len(ids_1) == 1, "the box keeps its track id across the two chips"
    assert {rig.served_by[("front", 1)], rig.served_by[("front", 2)]} == {"0", "1"}


def test_a_failing_chip_is_taken_out_of_service_and_the_other_serves_every_camera(
    rigs: list[Rig],
) -> None:
    healthy, failing = Engine(), Engine(fail_with=RuntimeError("device lost: PCIe link down"))
    rig = _started(rigs, {"0": healthy, "1": failing})
    step = 0
    while rig.chip("1").serving:
        step += 1
        assert step < 500, "chip 1 was never taken out of service"
        camera = CAMERAS[step % len(CAMERAS)]
        rig.send(camera, step)
        assert _wait(lambda camera=camera, step=step: (camera, step) in rig.finished)
    assert _wait(lambda: failing.closed == 1), "the lost chip's engine is released"
    snapshot = rig.chip("1").snapshot()
    assert snapshot.state == OUT_OF_SERVICE and rig.lost == ["1"]
    assert snapshot.reason == "engine error: RuntimeError: device lost: PCIe link down"
    assert snapshot.stats.engine_errors == ENGINE_ERROR_LIMIT
    assert [chip.name for chip in rig.pool.serving] == ["0"]
    for camera in CAMERAS:
        before = len(rig.outputs[camera].published)
        rig.send(camera, 100)
        assert rig.outputs[camera].wait_for(before + 1), f"{camera} is no longer served"
        assert rig.served_by[(camera, 100)] == "0"
    assert rig.chip("0").snapshot().state == SERVING and healthy.closed == 0


def test_a_chip_that_cannot_start_is_out_of_service_with_its_reason_and_the_others_serve(
    rigs: list[Rig],
) -> None:
    rig = _started(
        rigs, {"0": Engine(), "1": EngineError("cannot open Blackhole chip 1: held by another process")}
    )
    assert [chip.name for chip in rig.pool.serving] == ["0"]
    assert rig.chip("1").snapshot().state == OUT_OF_SERVICE
    assert rig.chip("1").reason == "cannot start: cannot open Blackhole chip 1: held by another process"
    assert set(rig.pool.startup_errors) == {"1"}
    assert rig.pool.description == {"engine": "stand-in", "device": "none", "dtype": "none"}
    for camera in CAMERAS:
        rig.send(camera, 3)
        assert rig.outputs[camera].wait_for(1)


def test_stop_releases_every_chips_engine(rigs: list[Rig]) -> None:
    engines = {"0": Engine(), "1": Engine(), "2": Engine()}
    rig = _started(rigs, dict(engines))
    rig.pool.stop()
    rig.pool.join()
    assert not rig.pool.alive
    assert [engine.closed for engine in engines.values()] == [1, 1, 1]
    assert {chip.snapshot().state for chip in rig.pool.chips} == {RELEASED}


#: A watchdog for tests: a frame held in the stand-in engine is stuck after 2 s (its start-up
#: and frames take milliseconds), checked every 50 ms.
QUICK_WATCHDOG = Watchdog(factor=10.0, min_s=2.0, period_s=0.05)


def _held(rig: Rig, engines: dict[str, Engine], camera: str, step: int) -> str:
    """Send ``step``, held in whichever chip's engine takes it; returns that chip's name."""
    rig.send(camera, step)
    assert _wait(lambda: any(engine.holding.is_set() for engine in engines.values()))
    return next(name for name, engine in engines.items() if engine.holding.is_set())


def test_a_hung_chip_is_taken_out_and_the_cameras_later_frames_go_out_on_the_other(
    rigs: list[Rig],
) -> None:
    engines = {"0": Engine(hold=1), "1": Engine(hold=1)}
    rig = _started(rigs, dict(engines), watchdog=QUICK_WATCHDOG)
    hung = _held(rig, engines, "front", 1)  # never released: a device call that does not return
    other = "1" if hung == "0" else "0"
    rig.send("front", 2)  # the other chip answers it, then waits for frame 1's turn
    assert rig.outputs["front"].wait_for(1), "the camera's later frame waited on the hung chip"
    assert rig.outputs["front"].published[0][0] == 2 and rig.served_by[("front", 2)] == other
    snapshot = rig.chip(hung).snapshot()
    assert snapshot.state == OUT_OF_SERVICE and rig.lost == [hung]
    stuck = "stuck: a frame of camera 'front' has been in the engine for more than 2 s"
    assert snapshot.reason.startswith(stuck)
    for camera in CAMERAS:
        rig.send(camera, 7)
        assert _wait(lambda camera=camera: (camera, 7) in rig.finished), f"{camera} is no longer served"
        assert rig.served_by[(camera, 7)] == other


def test_stop_is_not_blocked_by_a_hung_chip_whose_late_answer_is_dropped(rigs: list[Rig]) -> None:
    engines = {"0": Engine(hold=1), "1": Engine(hold=1)}
    rig = _started(rigs, dict(engines), watchdog=QUICK_WATCHDOG)
    hung = _held(rig, engines, "front", 1)
    other = "1" if hung == "0" else "0"
    rig.pool.stop()
    assert rig.pool.join() == (hung,), "join names the chip it did not wait for"
    assert engines[other].closed == 1 and engines[hung].closed == 0
    engines[hung].release.set()  # the call returns after all: its frame is dropped, its engine closed
    assert _wait(lambda: engines[hung].closed == 1)
    assert ("front", 1) not in rig.finished and rig.outputs["front"].published == []
    assert rig.chip(hung).snapshot().state == OUT_OF_SERVICE


def test_a_slow_frame_within_its_limit_is_not_stuck(rigs: list[Rig]) -> None:
    """The first frame's limit comes from the start-up (10 x 1 s here), not the 0.3 s floor."""
    engines = {"0": Engine(hold=1)}
    watchdog = Watchdog(factor=10.0, min_s=0.3, period_s=0.05)
    rig = _started(rigs, dict(engines), watchdog=watchdog, build_s=1.0)
    _held(rig, engines, "front", 1)
    threading.Event().wait(1.0)  # over the floor, far under 10 x the start-up
    engines["0"].release.set()
    assert rig.outputs["front"].wait_for(1)
    assert rig.chip("0").snapshot().state == SERVING and rig.lost == []
    rig.pool.stop()
    assert rig.pool.join() == ()


def test_the_watchdog_limit_is_its_factor_times_the_slowest_frame_and_at_least_its_floor() -> None:
    watchdog = Watchdog(factor=10.0, min_s=30.0)
    assert watchdog.limit_s(0.05) == 30.0
    assert watchdog.limit_s(40.0) == 400.0


def test_a_pool_without_chips_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one device"):
        ChipPool([], lambda _device: None, lambda *_: "", FrameSlot(), logger=_Logger())


def _wait(condition: Callable[[], bool]) -> bool:
    """Poll ``condition`` until true or LIMIT_S passed (a liveness bound, not a timing)."""
    ready = threading.Event()
    for _ in range(int(LIMIT_S / 0.01)):
        if condition():
            return True
        ready.wait(0.01)
    return condition()
