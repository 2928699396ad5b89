"""Each camera's frames that exemplar boxes can be drawn on, and the exemplars in force.

Kept only while the camera's ``prompt_boxes`` topic has a publisher; a request names its frame
by stamp and frame_id, and a prompt change clears what was in force (``generation``). Every
camera's kept frames share one byte budget (``KeptFrames``, one per node) and an age limit, so
a forgotten box tool holds at most KEPT_BYTES_LIMIT, and none of it for long once frames stop.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from tt_sam3_ros.core.errors import InputError, quoted
from tt_sam3_ros.core.exemplars import BOX_ONLY_PROMPT

#: Frames of each camera that prompt boxes can be drawn on, found by their stamp, kept only
#: while the camera's prompt_boxes topic has a publisher (each is the received message: a
#: 1920x1080 rgb8 image is 6.2 MB): the newest received ones, whatever became of them...
RECEIVED_FRAMES_KEPT = 30
#: ... and the newest answered ones (an operator draws on the overlay, which only answered
#: frames have; on a slow engine they are seconds older than the newest received).
ANSWERED_FRAMES_KEPT = 8
#: Bytes of image data kept for every camera together (the node's budget): past it the oldest
#: received frame of any camera goes first, answered frames only once no received one is left.
KEPT_BYTES_LIMIT = 256 * 1024 * 1024
#: A frame is let go this long after it was kept (received, or answered), whether or not newer
#: frames came: boxes are drawn on what an operator just saw.
KEPT_AGE_LIMIT_S = 60.0

RECEIVED, ANSWERED = "received", "answered"


@dataclasses.dataclass(frozen=True)
class _Kept:
    camera: str
    kind: str
    stamp_ns: int
    frame_id: str
    payload: Any
    nbytes: int
    kept_s: float


class KeptFrames:
    """Every camera's kept frames under one byte budget and one age limit (one per node).

    ``clock`` (seconds, monotonic) is there for tests. Thread-safe: the subscription callbacks
    note and find, the worker notes answered frames, a timer expires.
    """

    def __init__(
        self,
        limit_bytes: int = KEPT_BYTES_LIMIT,
        max_age_s: float = KEPT_AGE_LIMIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit_bytes = limit_bytes
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._frames: list[_Kept] = []  # oldest first

    def note(self, camera: str, kind: str, stamp_ns: int, frame_id: str, payload: Any, nbytes: int) -> None:
        """Keep a frame (once per camera, kind and stamp), then drop what exceeds the limits."""
        count_limit = RECEIVED_FRAMES_KEPT if kind == RECEIVED else ANSWERED_FRAMES_KEPT
        with self._lock:
            self._expire_locked()  # first: a frame noted again after its age limit is kept anew
            if kind == ANSWERED and any(
                (k.camera, k.kind, k.stamp_ns, k.frame_id) == (camera, kind, stamp_ns, frame_id)
                for k in self._frames
            ):
                return
            self._frames.append(_Kept(camera, kind, stamp_ns, frame_id, payload, nbytes, self._clock()))
            same = [k for k in self._frames if (k.camera, k.kind) == (camera, kind)]
            for extra in same[: max(0, len(same) - count_limit)]:
                self._frames.remove(extra)
            self._expire_locked()
            self._fit_budget_locked()

    def _expire_locked(self) -> None:
        oldest_kept_s = self._clock() - self.max_age_s
        self._frames = [k for k in self._frames if k.kept_s >= oldest_kept_s]

    def _fit_budget_locked(self) -> None:
        total = sum(k.nbytes for k in self._frames)
        for kind in (RECEIVED, ANSWERED):
            for kept in [k for k in self._frames if k.kind == kind]:
                if total <= self.limit_bytes:
                    return
                self._frames.remove(kept)
                total -= kept.nbytes

    def expire(self) -> None:
        """Let go of the frames past the age limit (called periodically: no frame may come)."""
        with self._lock:
            self._expire_locked()

    def forget(self, camera: str) -> None:
        with self._lock:
            self._frames = [k for k in self._frames if k.camera != camera]

    def of(self, camera: str) -> list[_Kept]:
        """The camera's frames still within the limits, answered ones first."""
        with self._lock:
            self._expire_locked()
            mine = [k for k in self._frames if k.camera == camera]
        return [k for k in mine if k.kind == ANSWERED] + [k for k in mine if k.kind == RECEIVED]

    @property
    def bytes_kept(self) -> int:
        with self._lock:
            return sum(k.nbytes for k in self._frames)


class ExemplarMemory:
    """One camera's exemplars: the recent frames boxes can be drawn on (found by stamp) and the
    encoded exemplars in force, which every later frame of the camera carries until cleared.

    Frames are kept as the caller's opaque payload (the node: its received message), with the
    size of its image data, in ``frames`` (shared by every camera of the node; a store of its
    own by default). The subscription callbacks note and find frames and clear; the worker keeps
    new encodings; one lock guards the exemplars, the store has its own.
    """

    def __init__(self, camera: str = "", frames: KeptFrames | None = None) -> None:
        self._camera = camera
        self._frames = frames if frames is not None else KeptFrames()
        self._lock = threading.Lock()
        self._states: dict[str, Any] = {}
        self._generation = 0

    def note_received(self, stamp_ns: int, frame_id: str, payload: Any, nbytes: int = 0) -> None:
        self._frames.note(self._camera, RECEIVED, stamp_ns, frame_id, payload, nbytes)

    def note_answered(self, stamp_ns: int, frame_id: str, payload: Any, nbytes: int = 0) -> None:
        self._frames.note(self._camera, ANSWERED, stamp_ns, frame_id, payload, nbytes)

    def forget_frames(self) -> None:
        """Let go of every kept frame (no one can draw boxes on them); the exemplars in force stay."""
        self._frames.forget(self._camera)

    @property
    def frames_kept(self) -> int:
        """How many frames are kept (received and answered, a frame in both counted twice)."""
        return len(self._frames.of(self._camera))

    def find(self, stamp_ns: int, frame_id: str) -> tuple[Any, int]:
        """The kept frame stamped ``stamp_ns`` and the current generation.

        Raises:
            InputError: no stamp, no kept frame with that stamp (saying which are kept), or one
                whose frame_id differs.
        """
        if not stamp_ns:
            raise InputError("the header has no stamp: stamp it with the image the boxes were drawn on")
        kept = self._frames.of(self._camera)
        with self._lock:
            generation = self._generation
        matches = [k for k in kept if k.stamp_ns == stamp_ns]
        if not matches:
            stamps = sorted(k.stamp_ns for k in kept)
            span = (
                f"{len(stamps)} frames stamped {_seconds(stamps[0])} to {_seconds(stamps[-1])}"
                if stamps
                else "none"
            )
            raise InputError(
                f"no frame stamped {_seconds(stamp_ns)} is kept (kept: {span}; the newest "
                f"{RECEIVED_FRAMES_KEPT} received and {ANSWERED_FRAMES_KEPT} answered frames, at most "
                f"{_size(self._frames.limit_bytes)} for every camera together and "
                f"{self._frames.max_age_s:.0f} s each, and only while prompt_boxes has a publisher: "
                "create it before the frame you draw on arrives)"
            )
        same_frame = [k for k in matches if k.frame_id == frame_id]
        if not same_frame:
            raise InputError(
                f"the boxes name frame_id {quoted(frame_id)} and the image stamped {_seconds(stamp_ns)} "
                f"has {quoted(matches[0].frame_id)}"
            )
        return same_frame[0].payload, generation

    def clear(self) -> bool:
        """Forget the exemplars in force (and any request still pending); True if there were some."""
        with self._lock:
            self._generation += 1
            had, self._states = bool(self._states), {}
        return had

    def keep(self, states: dict[str, Any], generation: int) -> bool:
        """Put ``states`` in force unless cleared since ``generation``; True when they were."""
        with self._lock:
            if generation != self._generation:
                return False
            self._states = dict(states)
            return True

    @property
    def states(self) -> dict[str, Any]:
        """The encoded exemplars in force, by concept name ("" for the box-only concept)."""
        with self._lock:
            return dict(self._states)

    @property
    def has_box_only(self) -> bool:
        with self._lock:
            return BOX_ONLY_PROMPT in self._states


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:.0f} MiB" if nbytes >= 2**20 else f"{nbytes} bytes"


def _seconds(stamp_ns: int) -> str:
    return f"{stamp_ns // 1_000_000_000}.{stamp_ns % 1_000_000_000:09d}"
