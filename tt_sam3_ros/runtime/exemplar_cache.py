"""Each camera's frames that exemplar boxes can be drawn on, and the exemplars in force.

Kept only while the camera's ``prompt_boxes`` topic has a publisher; a request names its frame
by stamp and frame_id, and a prompt change clears what was in force (``generation``).
"""

from __future__ import annotations

import threading
from collections import deque
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


class ExemplarMemory:
    """One camera's exemplars: the recent frames boxes can be drawn on (found by stamp) and the
    encoded exemplars in force, which every later frame of the camera carries until cleared.

    Frames are kept as the caller's opaque payload (the node: its received message). The
    subscription callbacks note and find frames and clear; the worker keeps new encodings; one
    lock guards both sides.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: deque[tuple[int, str, Any]] = deque(maxlen=RECEIVED_FRAMES_KEPT)
        self._answered: deque[tuple[int, str, Any]] = deque(maxlen=ANSWERED_FRAMES_KEPT)
        self._states: dict[str, Any] = {}
        self._generation = 0

    def note_received(self, stamp_ns: int, frame_id: str, payload: Any) -> None:
        with self._lock:
            self._received.append((stamp_ns, frame_id, payload))

    def note_answered(self, stamp_ns: int, frame_id: str, payload: Any) -> None:
        with self._lock:
            if not any(kept[0] == stamp_ns and kept[1] == frame_id for kept in self._answered):
                self._answered.append((stamp_ns, frame_id, payload))

    def forget_frames(self) -> None:
        """Let go of every kept frame (no one can draw boxes on them); the exemplars in force stay."""
        with self._lock:
            self._received.clear()
            self._answered.clear()

    @property
    def frames_kept(self) -> int:
        """How many frames are kept (received and answered, a frame in both counted twice)."""
        with self._lock:
            return len(self._received) + len(self._answered)

    def find(self, stamp_ns: int, frame_id: str) -> tuple[Any, int]:
        """The kept frame stamped ``stamp_ns`` and the current generation.

        Raises:
            InputError: no stamp, no kept frame with that stamp (saying which are kept), or one
                whose frame_id differs.
        """
        if not stamp_ns:
            raise InputError("the header has no stamp: stamp it with the image the boxes were drawn on")
        with self._lock:
            kept = [*self._answered, *self._received]
            generation = self._generation
        matches = [k for k in kept if k[0] == stamp_ns]
        if not matches:
            stamps = sorted(k[0] for k in kept)
            span = (
                f"{len(stamps)} frames stamped {_seconds(stamps[0])} to {_seconds(stamps[-1])}"
                if stamps
                else "none"
            )
            raise InputError(
                f"no frame stamped {_seconds(stamp_ns)} is kept (kept: {span}; the newest "
                f"{RECEIVED_FRAMES_KEPT} received and {ANSWERED_FRAMES_KEPT} answered frames, and only "
                "while prompt_boxes has a publisher: create it before the frame you draw on arrives)"
            )
        same_frame = [k for k in matches if k[1] == frame_id]
        if not same_frame:
            raise InputError(
                f"the boxes name frame_id {quoted(frame_id)} and the image stamped {_seconds(stamp_ns)} "
                f"has {quoted(matches[0][1])}"
            )
        return same_frame[0][2], generation

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


def _seconds(stamp_ns: int) -> str:
    return f"{stamp_ns // 1_000_000_000}.{stamp_ns % 1_000_000_000:09d}"
