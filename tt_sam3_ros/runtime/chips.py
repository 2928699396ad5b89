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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tt_sam3_ros.runtime.worker import Frame, FrameSlot, FrameStats, InferenceWorker, StatsSnapshot

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
        with self._changed:
            self._changed.wait_for(lambda: self._next_out.get(frame.camera, 0) >= frame.seq)

    def done(self, frame: Frame) -> None:
        with self._changed:
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


class ChipPool:
    """One ``InferenceWorker`` per chip, all taking frames from one ``FrameSlot``.

    ``start`` builds every chip's engine one after another and warms them up at once, each on its
    worker's thread;
    ``wait_ready`` returns once each has started or failed. ``on_lost(chip)`` is called on the
    lost chip's thread once it is out of service (its engine closing); ``on_closed(chip)`` once
    its engine is closed. ``stop`` then ``join`` closes every engine.
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
        for worker in self._workers:
            worker.start()

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Whether every chip has started or failed to (``timeout_s`` None: wait for it)."""
        return all(worker.ready.wait(timeout_s) for worker in self._workers)

    def settle(self) -> None:
        """After ``wait_ready``: a chip that failed to start is out of service with its reason."""
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

    def join(self) -> None:
        for worker in self._workers:
            if worker.is_alive():
                worker.join()

    @property
    def alive(self) -> bool:
        return any(worker.is_alive() for worker in self._workers)

    def _serve(self, chip: Chip, segmenter: Any, frame: Frame) -> bool:
        """One frame on ``chip``; False takes the chip out of service (its worker then ends)."""
        try:
            lost = self._handle_frame(segmenter, frame, chip, lambda: self._turns.wait(frame))
        finally:
            self._turns.done(frame)
        if lost and chip.take_out_of_service(lost):
            self._on_lost(chip)
            return False
        return True

    @staticmethod
    def _closed(chip: Chip, on_closed: Callable[[Chip], None]) -> None:
        chip.released()
        on_closed(chip)
