"""What a live SAM 3 video session holds: its frame store for a stream, and its tensors counted.

transformers' inference session is written for a whole video; ``video_tracker.Sam3VideoTracker``
gives it frames one at a time and trims it after each. Here are the two pieces of that which
are not the tracking itself: ``StreamFrames`` (the frame store that keeps only the frame being
processed while reporting the stream's length, which transformers reads) and the accounting
behind ``Sam3VideoTracker.state()`` (``SessionState``: objects, memory frames, tensors and the
bytes behind them, a storage shared by several views counted once), so that a test or
/diagnostics can see the state stay bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class SessionState:
    """What the live session holds after a frame (all counts, for tests and diagnostics).

    Attributes:
        objects: objects being tracked.
        memory_frames: the most past frames any one object keeps outputs for (non-conditioning).
        conditioning_frames: the most conditioning frames any one object keeps.
        tensors: tensors the session refers to.
        tensor_bytes: bytes of the memory behind them (a storage shared by several views counted once).
    """

    objects: int
    memory_frames: int
    conditioning_frames: int
    tensors: int
    tensor_bytes: int


class StreamFrames(dict):
    """The session's frame store for a live stream: it holds the frame being processed only, but
    its length is the number of frames given so far, which transformers reads as the video's
    length (the tracker caps how many past object pointers it reads by it)."""

    def __init__(self) -> None:
        super().__init__()
        self.frames_given = 0

    def __setitem__(self, frame_index: int, pixels: object) -> None:
        dict.clear(self)
        super().__setitem__(frame_index, pixels)
        self.frames_given = max(self.frames_given, frame_index + 1)

    def __len__(self) -> int:
        return self.frames_given

    def drop_pixels(self) -> None:
        """Forget the frame's pixels, keep the count."""
        dict.clear(self)


def storage_bytes(tensors: object) -> dict[int, int]:
    """Bytes of each distinct storage behind ``tensors`` (views of one batch share it), by address."""
    storages = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return storages


def tensors_in(root: object) -> dict[int, torch.Tensor]:
    """Every tensor reachable from ``root`` through dicts, lists, tuples and sets, by identity."""
    import torch

    found: dict[int, torch.Tensor] = {}
    stack = [root]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            found[id(item)] = item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif hasattr(item, "_vision_features"):  # the session's feature cache
            stack.append(vars(item))
    return found
