"""Several chips behind one node: one engine per chip, each camera's newest frame dealt to
whichever chip is free, a failed chip taken out of service while the others serve.

No ROS here, like ``worker.py``: the pool is handed a ``build(device)`` function (weights,
engine for one chip) and a ``handle_frame`` function (decode, segment, publish), and reports
each chip's state and counters for /diagnostics.

Why one device per chip, not one mesh: the chips serve independent frames (data parallel,
nothing exchanged between them), so each engine has its own device, traces and buffers, and
runs on a thread of its own (every device call of an engine stays on its chip's thread, and the
chips run side by side). A mesh only forms over chips linked by Ethernet: p150a boards side
by side in one host are not, and ttnn 0.81.1, given two unlinked p150 boards, opens device 0 and
device 1 as two devices but refuses ``open_mesh_device(MeshShape(1, 2))`` ("only 1 devices are
available in the system mesh"). On a linked mesh the same shape holds with one submesh per chip.
The chips are opened together (the node hands every build one ``BlackholeChips``): ttnn ties a
chip opened alone to the chips opened before it, so closing a failed chip would close them too.

How frames are dealt: every chip's worker takes from one ``FrameSlot`` when it is free, so the
newest-frame rule per camera and the cameras' round-robin stay exactly as with one chip, and a
camera's frames go to any free chip. Two frames of one camera may then run on two chips at once;
``CameraTurns`` holds back the later one's outputs (exemplars kept, tracking, publishing) until
the earlier one is out, so a camera's outputs leave in the order its frames were taken and its
tracker sees them in that order, whichever chip served them.

A chip whose engine fails ``pipeline.ENGINE_ERROR_LIMIT`` frames in a row, or that cannot start,
is out of service: its worker closes its engine and ends, the reason stays for /diagnostics, and
the other chips go on serving every camera. The next configure opens every chip again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tt_sam3_ros.runtime.worker import Frame, FrameSlot, FrameStats, InferenceWorker, StatsSnapshot

#: The watchdog (``Watchdog``): a frame still in its engine after WATCHDOG_FACTOR times the slowest
#: frame the chip has answered (before its first: the pool's start-up, weights to warm-up), and at
#: least WATCHDOG_MIN_S, is stuck. A chip hung in a device call never returns; the factor and the
#: floor leave room for a frame slowed by a busy host. Checked every WATCHDOG_PERIOD_S.
WATCHDOG_FACTOR = 10.0
WATCHDOG_MIN_S = 30.0
WATCHDOG_PERIOD_S = 0.5

#: A chip's states, as /diagnostics says them.
STARTING, SERVING, OUT_OF_SERVICE, RELEASED = "starting", "serving", "out of service", "released"


@dataclass(frozen=True)
class ChipSnapshot:
    """A consistent copy of one chip's state and counters, for /diagnostics."""

    name: str
    state: str
    reason: str
    description: dict[str, str]
    stats: StatsSnapshot


@dataclass(frozen=True)
class Watchdog:
    """When a frame in a chip's engine counts as stuck: after ``factor`` times the slowest frame
    the chip has answered (before its first: the pool's start-up), and at least ``min_s``;
    checked every ``period_s``. Tests shorten them; the node uses the defaults."""

    factor: float = WATCHDOG_FACTOR
    min_s: float = WATCHDOG_MIN_S
    period_s: float = WATCHDOG_PERIOD_S

    def limit_s(self, slowest_s: float) -> float:
        return max(self.min_s, self.factor * slowest_s)


class Chip:
    """One chip behind the node: its name (the device id), its counters, and its state.

    ``device`` is what ``build`` is given for it (a chip id such as '1'; with one chip, the
    node's ``device`` parameter as set). Written by the chip's worker, read by /diagnostics.
    """

    def __init__(self, name: str, device: str) -> None:
        self.name = name
        self.device = device
        self.stats = FrameStats()
        self._lock = threading.Lock()
        self._state = STARTING
        self._reason = ""
        self._description: dict[str, str] = {}

    @property
    def state(self) -> str:
        with self._lock:
            return self._state

    @property
    def serving(self) -> bool:
        return self.state == SERVING

    @property
    def reason(self) -> str:
        with self._lock:
            return self._reason

    def started(self, description: dict[str, str]) -> None:
        """The chip's engine is built and warmed up: it serves (unless already taken out)."""
        with self._lock:
            self._description = dict(description)
            if self._state == STARTING:
                self._state = SERVING

    def released(self) -> None:
        """The chip's engine is closed; a chip out of service keeps that state and its reason."""
        with self._lock:
            if self._state != OUT_OF_SERVICE:
                self._state = RELEASED

    def take_out_of_service(self, reason: str) -> bool:
        """Mark the chip out of service with ``reason``; False when it already was not serving."""
        with self._lock:
            if self._state not in (STARTING, SERVING):
                return False
            self._state, self._reason = OUT_OF_SERVICE, reason
            return True

    def snapshot(self) -> ChipSnapshot:
        with self._lock:
            state, reason, description = self._state, self._reason, dict(self._description)
        return ChipSnapshot(self.name, state, reason, description, self.stats.snapshot())


class FrameAbandonedError(Exception):
    """Raised by ``wait_turn`` in a frame the watchdog gave up on: its camera's later frames have
    gone out already, so its outputs must not."""


class CameraTurns:
    """The order of each camera's outputs when its frames run on several chips at once.

    Frames are numbered per camera as they are taken (``Frame.seq``). ``wait`` returns once
    every earlier frame of the same camera is ``done``; every frame taken must be marked done
    exactly once, whether it was answered, refused or failed. Waits are on frames taken
    earlier, which no chip holds back, so no two frames can wait on each other.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._next_out: dict[str, int] = {}  # per camera: the lowest seq not yet done
        self._done_early: dict[str, set[int]] = {}  # per camera: done seqs above it

    def wait(self, frame: Frame) -> None:
        """Return once every earlier frame of the camera is done.

        Raises:
            FrameAbandonedError: ``frame`` itself was marked done meanwhile (the watchdog gave up on it).
        """
        with self._changed:
            self._changed.wait_for(lambda: self._next_out.get(frame.camera, 0) >= frame.seq)
            if self._is_done(frame):
                raise FrameAbandonedError(f"frame {frame.seq} of camera {frame.camera!r} was given up")

    def _is_done(self, frame: Frame) -> bool:
        return frame.seq < self._next_out.get(frame.camera, 0) or frame.seq in self._done_early.get(
            frame.camera, set()
        )

    def done(self, frame: Frame) -> None:
        """Mark ``frame`` done; a second mark (the watchdog's, then the chip's own) does nothing."""
        with self._changed:
            if self._is_done(frame):
                return
            early = self._done_early.setdefault(frame.camera, set())
            early.add(frame.seq)
            next_out = self._next_out.get(frame.camera, 0)
            while next_out in early:
                early.remove(next_out)
                next_out += 1
            self._next_out[frame.camera] = next_out
            self._changed.notify_all()


#: ``handle_frame(segmenter, frame, chip, wait_turn)``: one frame on one chip; ``wait_turn`` is
#: to be called once the engine answered, before the camera's outputs. Returns why the chip is
#: lost when this frame made it so (its engine's errors in a row), else '' or None.
HandleFrame = Callable[[Any, Frame, Chip, Callable[[], None]], str | None]


class _InFlight:
    """A frame in a chip's engine: when it went in, and the limit it is watched against."""

    def __init__(self, frame: Frame, limit_s: float) -> None:
        self.frame = frame
        self.since = time.monotonic()
        self.limit_s = limit_s


class ChipPool:
    """One ``InferenceWorker`` per chip, all taking frames from one ``FrameSlot``.

    ``start`` builds every chip's engine one after another and warms them up at once, each on its
    worker's thread;
    ``wait_ready`` returns once each has started or failed. ``on_lost(chip)`` is called once the
    chip is out of service: on its own thread (its engine closing), or on the watchdog's for a
    stuck chip; ``on_closed(chip)`` once its engine is closed. ``stop`` then ``join`` closes
    every engine but a stuck one's.

    A watchdog thread (``Watchdog``) takes a chip whose frame stays in its engine past the limit
    out of service ("stuck"), releases the camera's later frames on the other chips (their turn
    no longer waits on it) and stops ``join`` from waiting on it: a chip hung in a device call
    can neither stall the others nor block a stop. Its thread still holds the engine; if the call
    ever returns, the frame's outputs are dropped and the engine is closed then.
    """

    def __init__(
        self,
        devices: Sequence[tuple[str, str]],
        build: Callable[[str], Any],
        handle_frame: HandleFrame,
        slot: FrameSlot,
        logger: Any,
        on_lost: Callable[[Chip], None] = lambda _chip: None,
        on_closed: Callable[[Chip], None] = lambda _chip: None,
        watchdog: Watchdog | None = None,
    ) -> None:
        """``devices``: (name, device) of each chip, e.g. ('1', '1'); at least one."""
        if not devices:
            raise ValueError("a chip pool needs at least one device")
        self.chips = tuple(Chip(name, device) for name, device in devices)
        # Builds (weights, device open, upload) run one at a time: transformers' lazy imports are
        # not thread-safe (two chips loading at once failed with "cannot import name 'Sam3Model'
        # from 'transformers'"), and the host work competes for the same cores anyway. Warm-ups
        # (compiles, trace captures) and frames run side by side.
        self._build_lock = threading.Lock()
        self._slot = slot
        self._turns = CameraTurns()
        self._handle_frame = handle_frame
        self._on_lost = on_lost
        self._watchdog = watchdog or Watchdog()
        self._watch_lock = threading.Lock()
        self._in_flight: dict[str, _InFlight] = {}  # chip name -> its frame in the engine
        self._slowest_s: dict[str, float] = {}  # chip name -> its slowest answered frame
        self._startup_s = 0.0  # start() to settle(): every chip's basis before its first frame
        self._started_at = 0.0
        self._stuck: set[str] = set()
        self._watching = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="sam3-watchdog", daemon=True)
        self._workers = [
            InferenceWorker(
                build=lambda chip=chip: self._build_one(build, chip),
                handle_frame=lambda segmenter, frame, chip=chip: self._serve(chip, segmenter, frame),
                slot=slot,
                on_closed=lambda _description, chip=chip: self._closed(chip, on_closed),
                logger=logger,
                # one engine: the thread the node has always had; several: one per chip
                name="sam3-inference" if len(self.chips) == 1 else f"sam3-chip-{chip.name}",
            )
            for chip in self.chips
        ]

    def _build_one(self, build: Callable[[str], Any], chip: Chip) -> Any:
        with self._build_lock:
            return build(chip.device)

    def start(self) -> None:
        self._started_at = time.monotonic()
        for worker in self._workers:
            worker.start()
        self._watching.set()
        self._watcher.start()

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Whether every chip has started or failed to (``timeout_s`` None: wait for it)."""
        return all(worker.ready.wait(timeout_s) for worker in self._workers)

    def settle(self) -> None:
        """After ``wait_ready``: a chip that failed to start is out of service with its reason."""
        with self._watch_lock:
            self._startup_s = time.monotonic() - self._started_at
        for chip, worker in zip(self.chips, self._workers, strict=True):
            if worker.startup_error is not None:
                chip.take_out_of_service(f"cannot start: {worker.startup_error}")
            else:
                chip.started(worker.description)

    @property
    def startup_errors(self) -> dict[str, BaseException]:
        """Each chip that failed to start, with its error."""
        return {
            chip.name: worker.startup_error
            for chip, worker in zip(self.chips, self._workers, strict=True)
            if worker.startup_error is not None
        }

    @property
    def serving(self) -> tuple[Chip, ...]:
        return tuple(chip for chip in self.chips if chip.serving)

    @property
    def description(self) -> dict[str, str]:
        """What serves, in words: the first serving chip's engine description, else {}."""
        for chip, worker in zip(self.chips, self._workers, strict=True):
            if chip.serving:
                return dict(worker.description)
        return {}

    def stop(self) -> None:
        """Ask every worker to end after its frame in flight; ``join`` to wait for the closes."""
        self._slot.close()

    def join(self) -> tuple[str, ...]:
        """Wait for every worker's close but a stuck chip's (the watchdog keeps watching meanwhile:
        a frame that gets stuck during the wait ends it too); returns the stuck chips' names,
        whose engines stay open (their threads are blocked in the engine)."""
        for chip, worker in zip(self.chips, self._workers, strict=True):
            while worker.is_alive() and not self._is_stuck(chip):
                worker.join(self._watchdog.period_s)
        self._watching.clear()
        with self._watch_lock:
            return tuple(chip.name for chip in self.chips if chip.name in self._stuck)

    @property
    def alive(self) -> bool:
        return any(worker.is_alive() for worker in self._workers)

    def _serve(self, chip: Chip, segmenter: Any, frame: Frame) -> bool:
        """One frame on ``chip``; False takes the chip out of service (its worker then ends)."""
        self._went_in(chip, frame)
        try:
            lost = self._handle_frame(segmenter, frame, chip, lambda: self._answered(chip, frame))
        except FrameAbandonedError:
            return False  # the watchdog took the chip out meanwhile: its outputs must not leave
        finally:
            self._came_out(chip)
            self._turns.done(frame)
        if self._is_stuck(chip):
            return False  # answered after all, but too late: the chip stays out of service
        if lost and chip.take_out_of_service(lost):
            self._on_lost(chip)
            return False
        return True

    def _went_in(self, chip: Chip, frame: Frame) -> None:
        with self._watch_lock:
            basis = self._slowest_s.get(chip.name, self._startup_s)
            self._in_flight[chip.name] = _InFlight(frame, self._watchdog.limit_s(basis))

    def _answered(self, chip: Chip, frame: Frame) -> None:
        """The engine answered: the frame's engine time counts towards the chip's slowest frame,
        and the watchdog stops watching it (waiting for the turn is the other chips' time)."""
        self._came_out(chip)
        self._turns.wait(frame)

    def _came_out(self, chip: Chip) -> None:
        """The frame left the engine. A stuck chip's flight was already removed by ``_check``
        (under the same lock), so a late answer never counts towards the slowest frame."""
        with self._watch_lock:
            flight = self._in_flight.pop(chip.name, None)
            if flight is not None:
                took = time.monotonic() - flight.since
                self._slowest_s[chip.name] = max(took, self._slowest_s.get(chip.name, 0.0))

    def _is_stuck(self, chip: Chip) -> bool:
        with self._watch_lock:
            return chip.name in self._stuck

    def _watch(self) -> None:
        while self._watching.is_set():
            time.sleep(self._watchdog.period_s)
            for chip in self.chips:
                self._check(chip)

    def _check(self, chip: Chip) -> None:
        """Take ``chip`` out of service when its frame in the engine is past its limit."""
        with self._watch_lock:
            flight = self._in_flight.get(chip.name)
            if flight is None or time.monotonic() - flight.since <= flight.limit_s:
                return
            del self._in_flight[chip.name]
            self._stuck.add(chip.name)
        camera = f" of camera {flight.frame.camera!r}" if flight.frame.camera else ""
        reason = (
            f"stuck: a frame{camera} has been in the engine for more than "
            f"{flight.limit_s:.0f} s (the limit: {self._watchdog.factor:g}x its slowest frame or "
            f"start-up, at least {self._watchdog.min_s:g} s); its engine stays open"
        )
        self._turns.done(flight.frame)  # the camera's later frames go out on the other chips
        if chip.take_out_of_service(reason):
            self._on_lost(chip)

    @staticmethod
    def _closed(chip: Chip, on_closed: Callable[[Chip], None]) -> None:
        chip.released()
        on_closed(chip)
