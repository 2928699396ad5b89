"""The worker's hand-off with several cameras: newest frame per camera, round-robin, per-camera counts."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tt_sam3_ros.runtime.worker import Frame, FrameSlot, FrameStats, InferenceWorker, stats_per_camera

CAMERAS = ("front", "left", "right")


def _frame(camera: str, received_s: float = 0.0) -> Frame:
    return Frame(msg=None, received_s=received_s, camera=camera)


def test_every_busy_camera_gets_one_frame_per_round_whatever_its_rate() -> None:
    """'front' publishes ten times as often as the others; the worker still serves all three alike."""
    slot = FrameSlot(CAMERAS)
    served = {camera: 0 for camera in CAMERAS}
    dropped = {camera: 0 for camera in CAMERAS}
    for _ in range(300):
        for _ in range(10):
            dropped["front"] += slot.put(_frame("front"))
        for camera in ("left", "right"):
            dropped[camera] += slot.put(_frame(camera))
        frame = slot.take()
        assert frame is not None
        served[frame.camera] += 1
    assert served == {"front": 100, "left": 100, "right": 100}
    assert dropped["front"] > dropped["left"] > 0  # the fast camera loses most of its frames, counted


def test_a_camera_that_stops_publishing_holds_nothing_up() -> None:
    slot = FrameSlot(CAMERAS)
    slot.put(_frame("left"))  # left's last frame, then silence
    order = []
    for _ in range(5):
        slot.put(_frame("front"))
        frame = slot.take()
        assert frame is not None
        order.append(frame.camera)
    assert order == ["front", "left", "front", "front", "front"]


def test_each_camera_keeps_its_own_newest_frame() -> None:
    slot = FrameSlot(("front", "left"))
    slot.put(_frame("front", 1.0))
    slot.put(_frame("left", 2.0))
    assert slot.put(_frame("front", 3.0)) is True  # replaces front's frame only
    taken = [slot.take(), slot.take()]
    assert sorted((f.camera, f.received_s) for f in taken if f) == [("front", 3.0), ("left", 2.0)]
    slot.put(_frame("left"))
    assert slot.drain() == ("left",)
    assert slot.drain() == ()


def test_a_frame_from_an_unknown_camera_is_a_wiring_bug() -> None:
    with pytest.raises(KeyError, match="rear"):
        FrameSlot(CAMERAS).put(_frame("rear"))


def test_without_cameras_the_slot_is_the_single_camera_slot() -> None:
    slot = FrameSlot()
    first, second = Frame(msg=None, received_s=1.0), Frame(msg=None, received_s=2.0)
    assert slot.put(first) is False
    assert slot.put(second) is True
    taken = slot.take()
    assert taken is not None and taken.received_s == 2.0
    assert slot.clear() is False


def test_frames_are_numbered_per_camera_in_the_order_taken() -> None:
    """The numbers several chips' workers use to put a camera's outputs back in order."""
    slot = FrameSlot(("front", "left"))
    taken = []
    for received_s in range(3):
        slot.put(_frame("front", float(received_s)))
        slot.put(_frame("left", float(received_s)))
        taken += [slot.take(), slot.take()]
    numbered = [(f.camera, f.seq, f.received_s) for f in taken if f]
    assert sorted(numbered) == [
        ("front", 0, 0.0), ("front", 1, 1.0), ("front", 2, 2.0),
        ("left", 0, 0.0), ("left", 1, 1.0), ("left", 2, 2.0),
    ]  # fmt: skip


@given(
    st.lists(
        st.one_of(st.sampled_from(CAMERAS), st.just("take")),
        max_size=200,
    )
)
def test_no_camera_waits_more_than_one_round(events: list[str]) -> None:
    """Whatever the order of arrivals, a pending frame is served before any other camera twice.

    So a camera waits for at most ``len(cameras) - 1`` other frames, and the frame it gets
    served is the newest it sent.
    """
    slot = FrameSlot(CAMERAS)
    newest: dict[str, float] = {}
    others_served_since_pending: dict[str, int] = {}
    for clock, event in enumerate(events):
        if event != "take":
            slot.put(_frame(event, float(clock)))
            newest[event] = float(clock)
            others_served_since_pending.setdefault(event, 0)
            continue
        if not newest:
            continue  # take would wait for a frame
        frame = slot.take()
        assert frame is not None and frame.received_s == newest.pop(frame.camera)
        assert others_served_since_pending.pop(frame.camera) < len(CAMERAS)
        for camera in others_served_since_pending:
            others_served_since_pending[camera] += 1


def test_counts_are_per_camera_and_add_up_in_the_engine() -> None:
    engine = FrameStats()
    stats = stats_per_camera(("front", "left"), engine)
    for _ in range(3):
        stats["front"].count_received()
    stats["front"].count_processed(10.0, 20.0)
    stats["front"].count_dropped()
    stats["left"].count_received()
    stats["left"].count_rejected("bad input frame (left): width 0")
    assert stats["left"].count_engine_error("engine error: boom") == 1
    assert stats["front"].count_engine_error("engine error: boom") == 2  # in a row for the engine
    front, left, total = stats["front"].camera.snapshot(), stats["left"].camera.snapshot(), engine.snapshot()
    assert (front.received, front.processed, front.dropped, front.rejected) == (3, 1, 1, 0)
    assert (left.received, left.processed, left.dropped, left.rejected) == (1, 0, 0, 1)
    assert left.last_error == "engine error: boom" and front.output_age_ms == (20.0,)
    totals = (total.received, total.processed, total.dropped, total.rejected, total.engine_errors)
    assert totals == (4, 1, 1, 1, 2)


class _Segmenter:
    def describe(self) -> dict[str, str]:
        return {"engine": "fake"}

    def warmup(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Logger:
    def error(self, message: str) -> None:
        raise AssertionError(message)


def test_the_worker_thread_serves_the_live_camera_after_another_went_quiet() -> None:
    """A real worker thread, slower than the cameras: 'left' sends once, 'front' keeps going."""
    slot = FrameSlot(("front", "left"))
    handled: list[str] = []

    def handle(_segmenter: Any, frame: Frame) -> None:
        time.sleep(0.002)
        handled.append(frame.camera)

    worker = InferenceWorker(_Segmenter, handle, slot, lambda _d: None, _Logger())
    worker.start()
    assert worker.ready.wait(5.0)
    slot.put(_frame("left"))
    deadline = time.monotonic() + 10.0
    while handled.count("front") < 20 and time.monotonic() < deadline:
        slot.put(_frame("front"))
        time.sleep(0.001)
    worker.stop()
    worker.join(5.0)
    assert not worker.is_alive()
    assert handled.count("front") >= 20 and handled.count("left") == 1


def test_stop_wakes_a_worker_waiting_on_quiet_cameras() -> None:
    slot = FrameSlot(CAMERAS)
    worker = InferenceWorker(_Segmenter, lambda _s, _f: None, slot, lambda _d: None, _Logger())
    worker.start()
    assert worker.ready.wait(5.0)
    closer = threading.Timer(0.05, worker.stop)
    closer.start()
    worker.join(5.0)
    assert not worker.is_alive()
