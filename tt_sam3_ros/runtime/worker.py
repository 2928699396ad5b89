"""The node's inference thread: the newest-frame hand-off, the frame counters, and the worker.

No ROS here: the worker is handed a ``build`` function (weights, engine) and a ``handle_frame``
function (decode, segment, publish), so what runs on the engine's thread is plain Python and the
node keeps every ROS handle. Why one thread: engines require every device call on the thread
that opened the device, and a slow model must never stall the executor.

Several cameras share the worker: ``FrameSlot`` keeps the newest frame of each camera and
hands pending frames out in round-robin order, so a fast or busy camera cannot starve another
and a camera that stops publishing holds nothing up; each camera has its own ``FrameStats``,
and ``CameraStats`` counts every event on the camera's and on the engine's. Several chips: one
worker per chip, all taking from one ``FrameSlot`` (``chips.py``). New outputs (tracking ids,
depth) add to what ``handle_frame`` publishes, not to this module.
"""

from __future__ import annotations

import dataclasses
import threading
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tt_sam3_ros.core.errors import StartCancelledError

#: Frames whose timings make up the percentiles on /diagnostics.
STATS_WINDOW = 100


#: The camera name of a node without the ``cameras`` parameter: its one input is ``image``.
SINGLE_CAMERA = ""


@dataclass
class Frame:
    """One received image message (an Image or CompressedImage), when it arrived (monotonic s),
    and which camera sent it (``SINGLE_CAMERA`` without the ``cameras`` parameter)."""

    msg: Any
    received_s: float
    camera: str = SINGLE_CAMERA
    #: Exemplar boxes drawn on this frame (``pipeline.FrameInput.boxes``) and the generation of
    #: the camera's exemplars they were sent in.
    boxes: tuple[Any, ...] = ()
    generation: int = 0
    #: Set by ``FrameSlot.take``: how many frames of this camera were taken before this one, its
    #: place in the camera's output order when several chips serve (``chips.CameraTurns``).
    seq: int = 0


class FrameSlot:
    """A lock-guarded hand-off from the subscription callbacks to the worker: one slot per camera.

    ``put`` replaces a camera's unprocessed frame (the caller counts it as dropped), so the
    worker always starts on a camera's newest frame and latency cannot grow with the input
    rate. ``take`` serves the cameras with a pending frame in round-robin order, starting
    after the camera served last: with every camera busy each gets one frame per round,
    whatever its rate, and a camera with nothing pending is simply skipped.
    """

    def __init__(self, cameras: Sequence[str] = (SINGLE_CAMERA,)) -> None:
        self._ready = threading.Condition()
        self._order: tuple[str, ...] = tuple(dict.fromkeys(cameras)) or (SINGLE_CAMERA,)
        self._frames: dict[str, Frame] = {}
        self._next = 0  # index in _order where the next round-robin search starts
        self._taken = dict.fromkeys(self._order, 0)  # frames taken per camera: the next seq
        self._closed = False

    @property
    def cameras(self) -> tuple[str, ...]:
        return self._order

    def put(self, frame: Frame) -> bool:
        """Store ``frame`` in its camera's slot; True when it replaced one the worker had not taken.

        A pending frame with exemplar boxes is an operator's request: a plain frame does not
        replace it (the plain one is dropped instead, and True returned).

        Raises:
            KeyError: ``frame.camera`` is not one of this slot's cameras (a wiring bug).
        """
        if frame.camera not in self._order:
            raise KeyError(f"no slot for camera {frame.camera!r}")
        with self._ready:
            pending = self._frames.get(frame.camera)
            if pending is not None and pending.boxes and not frame.boxes:
                return True
            self._frames[frame.camera] = frame
            self._ready.notify()
        return pending is not None

    def take(self) -> Frame | None:
        """Wait for a frame and remove it (the next camera in turn); None once the slot is closed.

        The frame comes back numbered (``Frame.seq``, 0, 1, ... per camera) in the order taken:
        several workers may take from one slot, and the numbers say which came first.
        """
        with self._ready:
            while not self._frames and not self._closed:
                self._ready.wait()
            if self._closed:
                return None
            count = len(self._order)
            for step in range(count):
                index = (self._next + step) % count
                camera = self._order[index]
                if camera in self._frames:
                    self._next = (index + 1) % count
                    seq, self._taken[camera] = self._taken[camera], self._taken[camera] + 1
                    return dataclasses.replace(self._frames.pop(camera), seq=seq)
        raise AssertionError("unreachable: a pending frame belongs to a known camera")

    def drain(self) -> tuple[str, ...]:
        """Drop every pending frame; returns the cameras that had one (each counts a drop)."""
        with self._ready:
            cameras = tuple(camera for camera in self._order if camera in self._frames)
            self._frames.clear()
        return cameras

    def clear(self) -> bool:
        """Drop the pending frames, if any; returns whether there was one."""
        return bool(self.drain())

    def close(self) -> None:
        """Wake the worker for good: ``take`` returns None from now on."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called: the workers are to end (a start in flight gives up)."""
        with self._ready:
            return self._closed


@dataclass(frozen=True)
class StatsSnapshot:
    """A consistent copy of ``FrameStats``, taken under its lock, for /diagnostics."""

    received: int
    processed: int
    dropped: int
    rejected: int
    engine_errors: int
    consecutive_engine_errors: int
    output_errors: int
    processing_ms: tuple[float, ...]
    output_age_ms: tuple[float, ...]
    last_error: str
    last_outcome: str


@dataclass
class FrameStats:
    """Counters and recent timings of one input stream; every method holds ``lock``.

    Written by the subscription callback (received, dropped) and the worker (the outcome of
    each frame), read by the diagnostics timer through ``snapshot``.
    """

    lock: threading.Lock = field(default_factory=threading.Lock)
    received: int = 0
    processed: int = 0
    dropped: int = 0
    rejected: int = 0
    engine_errors: int = 0
    consecutive_engine_errors: int = 0
    output_errors: int = 0
    processing_ms: deque[float] = field(default_factory=lambda: deque(maxlen=STATS_WINDOW))
    output_age_ms: deque[float] = field(default_factory=lambda: deque(maxlen=STATS_WINDOW))
    last_error: str = ""
    last_outcome: str = "none"  # none | ok | rejected | engine_error | output_error

    def count_received(self) -> None:
        with self.lock:
            self.received += 1

    def count_dropped(self) -> None:
        with self.lock:
            self.dropped += 1

    def count_processed(self, processing_ms: float, output_age_ms: float | None) -> None:
        """A frame answered; ``output_age_ms`` is None when its stamp was unset."""
        with self.lock:
            self.processed += 1
            self.consecutive_engine_errors = 0
            self.processing_ms.append(processing_ms)
            if output_age_ms is not None:
                self.output_age_ms.append(output_age_ms)
            self.last_outcome = "ok"

    def count_rejected(self, reason: str) -> None:
        """A frame refused as bad input (the engine was not at fault)."""
        with self.lock:
            self.rejected += 1
            self.last_error = reason
            self.last_outcome = "rejected"

    def count_engine_error(self, reason: str) -> int:
        """A frame the engine failed on; returns how many failed in a row, this one included."""
        with self.lock:
            self.engine_errors += 1
            self.consecutive_engine_errors += 1
            self.last_error = reason
            self.last_outcome = "engine_error"
            return self.consecutive_engine_errors

    def count_output_error(self, reason: str) -> None:
        """A frame the engine answered whose outputs failed (publishing, tracking, 3D).

        The engine did its part, so its errors in a row end here: a fault after the engine
        must never make a healthy engine look lost.
        """
        with self.lock:
            self.output_errors += 1
            self.consecutive_engine_errors = 0
            self.last_error = reason
            self.last_outcome = "output_error"

    def start_run(self) -> None:
        """A new engine is in place: its errors in a row start from zero."""
        with self.lock:
            self.consecutive_engine_errors = 0

    def note_error(self, reason: str) -> None:
        """Record a failure outside frame handling (e.g. configure) as the last error."""
        with self.lock:
            self.last_error = reason

    def snapshot(self) -> StatsSnapshot:
        with self.lock:
            return StatsSnapshot(
                received=self.received,
                processed=self.processed,
                dropped=self.dropped,
                rejected=self.rejected,
                engine_errors=self.engine_errors,
                consecutive_engine_errors=self.consecutive_engine_errors,
                output_errors=self.output_errors,
                processing_ms=tuple(self.processing_ms),
                output_age_ms=tuple(self.output_age_ms),
                last_error=self.last_error,
                last_outcome=self.last_outcome,
            )


@dataclass(frozen=True)
class CameraStats:
    """One camera's counters and the engine's together: every event counts on both, and on the
    chip's that served the frame when several chips serve (``on_chip``).

    Why several: /diagnostics reports each camera's frames on its own, the engine's totals, and
    each chip's; errors in a row are the chip's (the engine's with one chip): it is the chip
    that fails, whichever camera's frame it was.
    """

    camera: FrameStats
    engine: FrameStats
    chip: FrameStats | None = None

    def on_chip(self, chip: FrameStats) -> CameraStats:
        """The same counters, counting a frame's outcome on ``chip`` as well."""
        return CameraStats(self.camera, self.engine, chip)

    def _served(self) -> tuple[FrameStats, ...]:
        return (self.camera, self.engine) if self.chip is None else (self.camera, self.engine, self.chip)

    def count_received(self) -> None:
        self.camera.count_received()
        self.engine.count_received()

    def count_dropped(self) -> None:
        self.camera.count_dropped()
        self.engine.count_dropped()

    def count_processed(self, processing_ms: float, output_age_ms: float | None) -> None:
        for stats in self._served():
            stats.count_processed(processing_ms, output_age_ms)

    def count_rejected(self, reason: str) -> None:
        for stats in self._served():
            stats.count_rejected(reason)

    def count_engine_error(self, reason: str) -> int:
        """Returns the chip's errors in a row (the engine's without a chip), this one included."""
        in_a_row = [stats.count_engine_error(reason) for stats in self._served()]
        return in_a_row[-1]

    def count_output_error(self, reason: str) -> None:
        for stats in self._served():
            stats.count_output_error(reason)


def stats_per_camera(cameras: Sequence[str], engine: FrameStats) -> dict[str, CameraStats]:
    """A fresh ``CameraStats`` for each camera, all counting into ``engine`` as well."""
    return {camera: CameraStats(FrameStats(), engine) for camera in cameras}


class InferenceWorker(threading.Thread):
    """The thread that owns one segmenter (one engine, one chip): builds it, runs frames, closes it.

    ``ready`` is set once the segmenter is built and warmed up, or when that failed
    (then ``startup_error`` holds the exception and the thread has ended). ``handle_frame``
    returning False takes the engine out of service: the thread closes it and ends while the
    slot stays open for any other worker taking from it (``chips.ChipPool``).
    """

    def __init__(
        self,
        build: Callable[[], Any],
        handle_frame: Callable[[Any, Frame], bool | None],
        slot: FrameSlot,
        on_closed: Callable[[dict[str, str]], None],
        logger: Any,
        name: str = "sam3-inference",
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._logger = logger
        self._build = build
        self._handle_frame = handle_frame
        self._slot = slot
        self._on_closed = on_closed
        self.ready = threading.Event()
        self.startup_error: BaseException | None = None
        self.description: dict[str, str] = {}

    def run(self) -> None:
        segmenter = None
        try:
            segmenter = self._build()
            self.description = dict(segmenter.describe())
            if self._slot.closed:  # stopped while building: the warm-up would only delay the release
                raise StartCancelledError("stopped before the warm-up")
            segmenter.warmup()
            # warm-up may change what serves (the ttnn engine's prompt_path auto): describe again
            self.description = dict(segmenter.describe())
        except BaseException as error:  # reported by on_configure, which waits on ready
            self.startup_error = error
            closed = segmenter is not None and self._close_after_failed_start(segmenter)
            if isinstance(error, StartCancelledError):
                self._logger.info(f"start given up: {error}" + ("; engine released" if closed else ""))
            self.ready.set()
            return
        self.ready.set()
        try:
            while (frame := self._slot.take()) is not None:
                try:
                    if self._handle_frame(segmenter, frame) is False:
                        break
                except Exception:  # a bug here must not silently end inference
                    self._logger.error(f"frame handling failed:\n{traceback.format_exc()}")
        finally:
            segmenter.close()
            self._on_closed(self.description)

    def _close_after_failed_start(self, segmenter: Any) -> bool:
        """Release a segmenter whose describe or warm-up failed: configure promises nothing held.
        True once it is closed.

        Warm-up is where a device fails first (compile, trace capture); a retried configure
        must not find the chip still held by this one.
        """
        try:
            segmenter.close()
        except Exception:
            self._logger.error(f"closing the engine after a failed start failed:\n{traceback.format_exc()}")
            return False
        return True

    def stop(self) -> None:
        """Ask the loop to end after the frame in flight; ``join`` to wait for the close."""
        self._slot.close()
