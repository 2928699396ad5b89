"""The node's inference thread: the newest-frame hand-off, the frame counters, and the worker.

No ROS here: the worker is handed a ``build`` function (weights, engine) and a ``handle_frame``
function (decode, segment, publish), so what runs on the engine's thread is plain Python and the
node keeps every ROS handle. Why one thread: engines require every device call on the thread
that opened the device, and a slow model must never stall the executor.

The pieces are per input: one ``FrameSlot`` and one ``FrameStats`` describe one image stream,
so a node with several cameras holds one of each per camera, and new outputs (tracking ids,
depth) add to what ``handle_frame`` publishes, not to this module.
"""

from __future__ import annotations

import threading
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Frames whose timings make up the percentiles on /diagnostics.
STATS_WINDOW = 100


@dataclass
class Frame:
    """One received image message (an Image or CompressedImage), and when it arrived (monotonic s)."""

    msg: Any
    received_s: float


class FrameSlot:
    """A one-slot, lock-guarded hand-off from the subscription callback to the worker.

    ``put`` replaces an unprocessed frame (the caller counts it as dropped), so the worker
    always starts on the newest frame and latency cannot grow with the input rate.
    """

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._frame: Frame | None = None
        self._closed = False

    def put(self, frame: Frame) -> bool:
        """Store ``frame``; returns True when it replaced one the worker had not taken."""
        with self._ready:
            replaced = self._frame is not None
            self._frame = frame
            self._ready.notify()
        return replaced

    def take(self) -> Frame | None:
        """Wait for a frame and remove it; None once the slot is closed."""
        with self._ready:
            while self._frame is None and not self._closed:
                self._ready.wait()
            if self._closed:
                return None
            frame, self._frame = self._frame, None
            return frame

    def clear(self) -> bool:
        """Drop the pending frame, if any; returns whether there was one."""
        with self._ready:
            had_frame, self._frame = self._frame is not None, None
        return had_frame

    def close(self) -> None:
        """Wake the worker for good: ``take`` returns None from now on."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()


@dataclass(frozen=True)
class StatsSnapshot:
    """A consistent copy of ``FrameStats``, taken under its lock, for /diagnostics."""

    received: int
    processed: int
    dropped: int
    rejected: int
    engine_errors: int
    consecutive_engine_errors: int
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
    processing_ms: deque[float] = field(default_factory=lambda: deque(maxlen=STATS_WINDOW))
    output_age_ms: deque[float] = field(default_factory=lambda: deque(maxlen=STATS_WINDOW))
    last_error: str = ""
    last_outcome: str = "none"  # none | ok | rejected | engine_error

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
                processing_ms=tuple(self.processing_ms),
                output_age_ms=tuple(self.output_age_ms),
                last_error=self.last_error,
                last_outcome=self.last_outcome,
            )


class InferenceWorker(threading.Thread):
    """The thread that owns the segmenter: builds it, runs every frame, closes it.

    ``ready`` is set once the segmenter is built and warmed up, or when that failed
    (then ``startup_error`` holds the exception and the thread has ended).
    """

    def __init__(
        self,
        build: Callable[[], Any],
        handle_frame: Callable[[Any, Frame], None],
        slot: FrameSlot,
        on_closed: Callable[[dict[str, str]], None],
        logger: Any,
    ) -> None:
        super().__init__(name="sam3-inference", daemon=True)
        self._logger = logger
        self._build = build
        self._handle_frame = handle_frame
        self._slot = slot
        self._on_closed = on_closed
        self.ready = threading.Event()
        self.startup_error: BaseException | None = None
        self.description: dict[str, str] = {}

    def run(self) -> None:
        try:
            segmenter = self._build()
            self.description = dict(segmenter.describe())
            segmenter.warmup()
        except BaseException as error:  # reported by on_configure, which waits on ready
            self.startup_error = error
            self.ready.set()
            return
        self.ready.set()
        try:
            while (frame := self._slot.take()) is not None:
                try:
                    self._handle_frame(segmenter, frame)
                except Exception:  # a bug here must not silently end inference
                    self._logger.error(f"frame handling failed:\n{traceback.format_exc()}")
        finally:
            segmenter.close()
            self._on_closed(self.description)

    def stop(self) -> None:
        """Ask the loop to end after the frame in flight; ``join`` to wait for the close."""
        self._slot.close()
