"""What one segmentation call returns: instances in source-image pixels.

Masks are kept as the crop that holds every pixel they cover (plus its origin), not
as full images: a 1920x1080 frame with 20 small objects then costs a few hundred
kilobytes instead of 40 MB, and the instance label image is written crop by crop.
``Instance.mask`` still gives the full-size boolean mask when asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: mono8 holds ids 1..255; further instances are dropped from the label image, never wrapped.
MAX_LABELLED_INSTANCES = 255
#: The node's first track id: above every position a frame's detection can have (1..255), so an
#: untracked detection's id (its position, the mask value) is never also a track id.
FIRST_TRACK_ID = MAX_LABELLED_INSTANCES + 1


@dataclass(frozen=True, eq=False)
class Instance:
    """One object found for one prompt.

    Instances compare by value: equal when every field is, the mask crop pixel for pixel (the
    generated ``==`` would compare arrays and raise). The hash leaves the mask out, so equal
    instances hash alike and instances can key a dict or fill a set.

    Attributes:
        prompt: the prompt text that found it.
        prompt_index: index of that prompt in the call's prompt list.
        score: sigmoid(logit) * sigmoid(presence), in [0, 1].
        box: (x1, y1, x2, y2) in source pixels, float, clamped to the image
            (x in [0, width], y in [0, height]; pixel i spans [i, i + 1)).
        mask_crop: bool (h, w): the mask inside the window starting at ``crop_origin``.
        crop_origin: (row, column) of ``mask_crop``'s top-left pixel in the source image.
        image_size: (height, width) of the source image.
        track_id: the id this object keeps from frame to frame, set by
            ``tracking.InstanceTracker`` (None when the instance was not tracked).
    """

    prompt: str
    prompt_index: int
    score: float
    box: tuple[float, float, float, float]
    mask_crop: np.ndarray
    crop_origin: tuple[int, int]
    image_size: tuple[int, int]
    track_id: int | None = None

    def _fields(self) -> tuple[object, ...]:
        return (
            self.prompt,
            self.prompt_index,
            self.score,
            self.box,
            self.crop_origin,
            self.image_size,
            self.track_id,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Instance):
            return NotImplemented
        return self._fields() == other._fields() and np.array_equal(self.mask_crop, other.mask_crop)

    def __hash__(self) -> int:
        return hash(self._fields())

    def with_track_id(self, track_id: int | None) -> Instance:
        """This instance with ``track_id`` set (the mask crop is shared, not copied).

        Equal to ``dataclasses.replace(self, track_id=track_id)``, without its per-field
        checks: the tracker calls it for every instance of every frame.
        """
        copy = object.__new__(Instance)
        copy.__dict__.update(self.__dict__)
        copy.__dict__["track_id"] = track_id
        return copy

    @property
    def mask(self) -> np.ndarray:
        """bool (height, width): the full-size mask (a new array on every call)."""
        full = np.zeros(self.image_size, dtype=bool)
        row, col = self.crop_origin
        height, width = self.mask_crop.shape
        full[row : row + height, col : col + width] = self.mask_crop
        return full

    @property
    def area(self) -> int:
        """Number of mask pixels."""
        return int(np.count_nonzero(self.mask_crop))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no mask pixels); ``track_id`` only when tracked."""
        summary: dict[str, Any] = {
            "prompt": self.prompt,
            "prompt_index": self.prompt_index,
            "score": round(self.score, 6),
            "box_xyxy": [round(v, 3) for v in self.box],
            "mask_area": self.area,
        }
        if self.track_id is not None:
            summary["track_id"] = self.track_id
        return summary


@dataclass
class SegmentationResult:
    """All instances found in one image, highest score first.

    Attributes:
        image_size: (height, width) of the source image.
        prompts: the prompts, in the order given.
        instances: instances with score above the threshold, sorted by score (descending);
            instance k (1-based) has id k in ``instance_mask()``.
        presence: per prompt, sigmoid(presence logit): how sure the model is that the
            concept is in the image at all.
        timing_ms: wall time per stage of this call, in milliseconds.
        exemplars: the engine's encoded exemplar boxes of each concept that had some, by concept
            name ("" for the box-only concept), to carry to later images
            (``Sam3Segmenter(..., carried=result.exemplars)``); engine-owned, not serialised.
    """

    image_size: tuple[int, int]
    prompts: list[str]
    instances: list[Instance]
    presence: dict[str, float]
    timing_ms: dict[str, float] = field(default_factory=dict)
    exemplars: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def instance_mask(self) -> np.ndarray:
        """uint8 (height, width) label image: 0 background, k the k-th instance.

        Where instances overlap, the higher-scoring one keeps the pixel. At most 255
        instances are labelled; any beyond are left out (mono8 cannot hold them).
        """
        labels = np.zeros(self.image_size, dtype=np.uint8)
        labelled = self.instances[:MAX_LABELLED_INSTANCES]
        # Paint lowest score first so higher scores overwrite shared pixels.
        for instance_id in range(len(labelled), 0, -1):
            instance = labelled[instance_id - 1]
            row, col = instance.crop_origin
            height, width = instance.mask_crop.shape
            window = labels[row : row + height, col : col + width]
            window[instance.mask_crop] = instance_id
        return labels

    def detection_ids(self) -> list[int]:
        """The id of each labelled instance, in mask order: its track id when it has one, else its
        position k (the mask value; the node's track ids start above every position, at
        FIRST_TRACK_ID). What Detection2D.id, Detection3D.id and a cloud point's
        ``instance`` carry."""
        return [
            position if instance.track_id is None else int(instance.track_id)
            for position, instance in enumerate(self.instances[:MAX_LABELLED_INSTANCES], start=1)
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: ids match ``instance_mask()`` values."""
        return {
            "image_size": {"height": self.image_size[0], "width": self.image_size[1]},
            "prompts": list(self.prompts),
            "presence": {prompt: round(p, 6) for prompt, p in self.presence.items()},
            "instances": [
                {"id": index, **instance.to_dict()} for index, instance in enumerate(self.instances, start=1)
            ],
            "timing_ms": {stage: round(ms, 3) for stage, ms in self.timing_ms.items()},
        }
