"""Sam3VideoEngine: SAM 3's video model loaded once, one ``Sam3VideoTracker`` session per stream.

What the node's worker holds in place of a ``Sam3Segmenter`` when ``tracker`` is ``sam3``: it
has the segmenter's engine-facing methods (describe, warmup, close), and each camera asks it for
a tracker of its own (``new_tracker``), so the cameras share the model's weights and keep their
own memories. No ROS here.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np

from tt_sam3_ros.core import preprocess
from tt_sam3_ros.core.video_tracker import DEFAULT_FORGET_AFTER_FRAMES, Sam3VideoTracker

if TYPE_CHECKING:
    from transformers import Sam3VideoModel, Sam3VideoProcessor


class Sam3VideoEngine:
    """SAM 3's video model loaded once, serving one ``Sam3VideoTracker`` session per stream.

    What the node's worker holds in place of a ``Sam3Segmenter`` when ``tracker`` is ``sam3``:
    it describes, warms up and closes like one; each camera asks it for its own tracker.
    """

    def __init__(
        self,
        model: Sam3VideoModel,
        processor: Sam3VideoProcessor,
        model_description: str = "",
        max_image_side: int = preprocess.DEFAULT_MAX_IMAGE_SIDE,
        forget_after_frames: int = DEFAULT_FORGET_AFTER_FRAMES,
        is_random: bool = False,
    ) -> None:
        self.model: Sam3VideoModel | None = model
        self.processor = processor
        self.max_image_side = max_image_side
        self.forget_after_frames = forget_after_frames
        self.is_random = is_random
        self._trackers: list[weakref.ref[Sam3VideoTracker]] = []
        self._description = {
            "engine": "torch",
            "tracker": "sam3",
            "device": str(model.device),
            "dtype": "float32",
            "model": model_description or type(model).__name__,
        }

    @classmethod
    def from_pretrained(
        cls,
        model_id: str = "facebook/sam3",
        revision: str | None = None,
        weights_dir: str | None = None,
        device: str | None = None,
        max_image_side: int = preprocess.DEFAULT_MAX_IMAGE_SIDE,
        forget_after_frames: int = DEFAULT_FORGET_AFTER_FRAMES,
    ) -> Sam3VideoEngine:
        """Load the video model as ``Sam3VideoTracker.from_pretrained`` does (same errors)."""
        loaded = Sam3VideoTracker.from_pretrained(model_id, revision, weights_dir, device=device)
        return cls(
            loaded.model,
            loaded.processor,
            model_description=weights_dir or model_id,
            max_image_side=max_image_side,
            forget_after_frames=forget_after_frames,
            is_random=loaded.is_random,
        )

    def describe(self) -> dict[str, str]:
        """What runs (for logs and /diagnostics)."""
        return dict(self._description)

    def warmup(self) -> None:
        """One frame through a throwaway session, so the first camera frame pays no first-call costs."""
        tracker = self.new_tracker()
        tracker(np.zeros((64, 64, 3), dtype=np.uint8), ["object"])

    def new_tracker(self) -> Sam3VideoTracker:
        """A fresh session (no objects, no memory) over the shared model."""
        if self.model is None:
            raise RuntimeError("the SAM 3 video engine is closed")
        tracker = Sam3VideoTracker(self.model, self.processor, forget_after_frames=self.forget_after_frames)
        self._trackers.append(weakref.ref(tracker))
        return tracker

    def close(self) -> None:
        """Drop the model and every session it served, so their memory goes now. Idempotent."""
        for tracker_ref in self._trackers:
            tracker = tracker_ref()
            if tracker is not None:
                tracker.close()
        self._trackers.clear()
        self.model = None
