"""Track ids across frames: the same object keeps the same id while it stays in view. No ROS.

    tracker = InstanceTracker(max_age_s=1.0, min_iou=0.3)
    tracked = tracker.update(result, stamp_s)      # same instances, same order, each with a track_id

How a frame is associated with the tracks alive before it:

1. Each track predicts where its object is now: its last box moved by a constant velocity (the
   smoothed motion of its box centre, in pixels per second) times the time since it was last
   seen. A camera pan moves every box the same way, so a track that has seen two frames follows
   the pan instead of losing its object.
2. A detection may only continue a track of the same prompt text. For each such pair whose
   predicted box overlaps the detection's box, the overlap of the masks is measured: the track's
   last mask crop, shifted by the predicted motion, against the detection's crop, counted only on
   the intersection of the two crop windows (never a full-size mask). Pairs whose IoU is below
   ``min_iou`` cannot match.
3. The pairs are assigned optimally (largest total IoU, scipy's linear_sum_assignment).
4. A matched track takes the detection's box, mask and motion; every unmatched detection starts a
   new track with the next id; a track unmatched for longer than ``max_age_s`` dies. Ids count up
   from 1 and are never reused during the tracker's life (``reset()`` included).

Why not a library: norfair takes custom distances but pins numpy < 2 (this package pins 2.4);
supervision's and boxmot's ByteTrack match boxes only, ignore the prompt and drop the detections
they have not confirmed, whereas the node must give every detection an id and masks separate
crossing objects that boxes cannot. The benchmark (``python -m benchmarks --only tracking``)
compares this tracker with supervision's ByteTrack on the same input.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from .errors import InputError
from .results import Instance, SegmentationResult

LOG = logging.getLogger(__name__)

DEFAULT_MAX_AGE_S = 1.0
DEFAULT_MIN_IOU = 0.3
#: Weight of the newest measured velocity in the smoothed one (the rest is the previous estimate).
VELOCITY_GAIN = 0.6
#: A cost above every feasible one (feasible costs are 1 - IoU, in [0, 1)).
_INFEASIBLE = 1e6


def check_tracking_settings(max_age_s: float, min_iou: float) -> None:
    """Raise InputError unless max_age_s is finite and > 0 and min_iou in (0, 1]."""
    if not (math.isfinite(max_age_s) and max_age_s > 0.0):
        raise InputError(f"track_max_age_s must be a finite number of seconds above 0, got {max_age_s}")
    if not (math.isfinite(min_iou) and 0.0 < min_iou <= 1.0):
        raise InputError(f"track_min_iou must be in (0, 1], got {min_iou}")


@dataclass
class _Track:
    """One object followed across frames."""

    track_id: int
    prompt: str
    box: np.ndarray  # float64 (4,) x1 y1 x2 y2 when last seen
    mask_crop: np.ndarray  # bool (h, w) when last seen
    crop_origin: tuple[int, int]  # (row, col)
    mask_area: int
    last_seen_s: float
    velocity: np.ndarray  # float64 (2,) box centre, pixels per second (x, y)
    hits: int = 1


class InstanceTracker:
    """Gives each instance of a stream of SegmentationResults a track id stable across frames."""

    def __init__(self, max_age_s: float = DEFAULT_MAX_AGE_S, min_iou: float = DEFAULT_MIN_IOU) -> None:
        check_tracking_settings(max_age_s, min_iou)
        self.max_age_s = float(max_age_s)
        self.min_iou = float(min_iou)
        self._tracks: list[_Track] = []
        self._next_id = 1
        self._last_stamp_s: float | None = None

    @property
    def track_count(self) -> int:
        """Tracks alive (matched within the last ``max_age_s``)."""
        return len(self._tracks)

    def configure(self, max_age_s: float, min_iou: float) -> None:
        """Change the settings; tracks alive stay alive and keep their ids."""
        check_tracking_settings(max_age_s, min_iou)
        self.max_age_s = float(max_age_s)
        self.min_iou = float(min_iou)

    def reset(self) -> None:
        """Forget every track. Ids already given are still never given again."""
        self._tracks.clear()
        self._last_stamp_s = None

    def forget_prompts(self, kept: list[str] | tuple[str, ...] | set[str]) -> None:
        """Drop the tracks of prompts not in ``kept`` (a prompt set changed)."""
        keep = set(kept)
        self._tracks = [track for track in self._tracks if track.prompt in keep]

    def update(self, result: SegmentationResult, stamp_s: float) -> SegmentationResult:
        """Associate one frame with the tracks; return it with every instance's ``track_id`` set.

        The instances keep their order (so mask value k is still the k-th instance); only
        ``track_id`` changes. Tracks of prompts no longer in ``result.prompts`` are dropped.

        Args:
            result: one frame's instances.
            stamp_s: the frame's time in seconds (the image stamp). Time that goes backwards
                (a replayed bag looping) starts the tracks afresh.

        Raises:
            InputError: ``stamp_s`` is not a finite number.
        """
        stamp_s = float(stamp_s)
        if not math.isfinite(stamp_s):
            raise InputError(f"frame stamp must be a finite number of seconds, got {stamp_s}")
        if self._last_stamp_s is not None and stamp_s < self._last_stamp_s:
            LOG.info("frame time went back %.3f s: tracks restarted", self._last_stamp_s - stamp_s)
            self._tracks.clear()
        self._last_stamp_s = stamp_s
        self.forget_prompts(result.prompts)
        self._tracks = [t for t in self._tracks if stamp_s - t.last_seen_s <= self.max_age_s]

        instances = result.instances
        boxes = np.array([i.box for i in instances], dtype=np.float64).reshape(-1, 4)
        areas = [int(np.count_nonzero(i.mask_crop)) for i in instances]
        matches = self._associate(instances, boxes, areas, stamp_s)
        ids: list[int] = []
        for k, instance in enumerate(instances):
            track = matches.get(k)
            if track is None:
                track = self._birth(instance, boxes[k], areas[k], stamp_s)
            else:
                self._continue(track, instance, boxes[k], areas[k], stamp_s)
            ids.append(track.track_id)
        tracked = [dataclasses.replace(i, track_id=t) for i, t in zip(instances, ids, strict=True)]
        return dataclasses.replace(result, instances=tracked)

    def _associate(
        self, instances: list[Instance], boxes: np.ndarray, areas: list[int], stamp_s: float
    ) -> dict[int, _Track]:
        """Detection index -> the track it continues, for the optimal feasible pairs."""
        if not instances or not self._tracks:
            return {}
        shifts = [track.velocity * (stamp_s - track.last_seen_s) for track in self._tracks]
        predicted = np.array([t.box + np.tile(s, 2) for t, s in zip(self._tracks, shifts, strict=True)])
        cost = np.full((len(instances), len(self._tracks)), _INFEASIBLE)
        overlapping = _boxes_overlap(boxes, predicted)
        same_prompt = np.array([i.prompt for i in instances], dtype=object)[:, None] == np.array(
            [t.prompt for t in self._tracks], dtype=object
        )
        for k, j in zip(*np.nonzero(overlapping & same_prompt), strict=True):
            track = self._tracks[j]
            instance = instances[k]
            if areas[k] and track.mask_area:
                dy, dx = round(float(shifts[j][1])), round(float(shifts[j][0]))
                origin = (track.crop_origin[0] + dy, track.crop_origin[1] + dx)
                iou = crop_iou(
                    instance.mask_crop,
                    instance.crop_origin,
                    areas[k],
                    track.mask_crop,
                    origin,
                    track.mask_area,
                )
            else:  # a detection without mask pixels is matched on its box
                iou = box_iou(boxes[k], predicted[j])
            if iou >= self.min_iou:
                cost[k, j] = 1.0 - iou
        rows, cols = linear_sum_assignment(cost)
        return {int(k): self._tracks[j] for k, j in zip(rows, cols, strict=True) if cost[k, j] < _INFEASIBLE}

    def _birth(self, instance: Instance, box: np.ndarray, area: int, stamp_s: float) -> _Track:
        track = _Track(
            track_id=self._next_id,
            prompt=instance.prompt,
            box=box,
            mask_crop=instance.mask_crop,
            crop_origin=instance.crop_origin,
            mask_area=area,
            last_seen_s=stamp_s,
            velocity=np.zeros(2),
        )
        self._next_id += 1
        self._tracks.append(track)
        return track

    @staticmethod
    def _continue(track: _Track, instance: Instance, box: np.ndarray, area: int, stamp_s: float) -> None:
        elapsed = stamp_s - track.last_seen_s
        if elapsed > 0.0:
            measured = (_centre(box) - _centre(track.box)) / elapsed
            gain = 1.0 if track.hits == 1 else VELOCITY_GAIN
            track.velocity = gain * measured + (1.0 - gain) * track.velocity
        track.box = box
        track.mask_crop = instance.mask_crop
        track.crop_origin = instance.crop_origin
        track.mask_area = area
        track.last_seen_s = stamp_s
        track.hits += 1


def crop_iou(
    crop_a: np.ndarray,
    origin_a: tuple[int, int],
    area_a: int,
    crop_b: np.ndarray,
    origin_b: tuple[int, int],
    area_b: int,
) -> float:
    """IoU of two masks given as crops at (row, col) origins, counted on the windows' intersection.

    ``area_a`` and ``area_b`` are the crops' pixel counts (passed in: each is counted once per frame).
    """
    union_base = area_a + area_b
    if union_base == 0:
        return 0.0
    row0 = max(origin_a[0], origin_b[0])
    col0 = max(origin_a[1], origin_b[1])
    row1 = min(origin_a[0] + crop_a.shape[0], origin_b[0] + crop_b.shape[0])
    col1 = min(origin_a[1] + crop_a.shape[1], origin_b[1] + crop_b.shape[1])
    if row1 <= row0 or col1 <= col0:
        return 0.0
    window_a = crop_a[row0 - origin_a[0] : row1 - origin_a[0], col0 - origin_a[1] : col1 - origin_a[1]]
    window_b = crop_b[row0 - origin_b[0] : row1 - origin_b[0], col0 - origin_b[1] : col1 - origin_b[1]]
    inter = int(np.count_nonzero(window_a & window_b))
    return inter / (union_base - inter)


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two x1 y1 x2 y2 boxes (0 when both are empty)."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def _boxes_overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """bool (len(a), len(b)): which boxes of ``a`` share area with which of ``b``."""
    return (np.minimum(a[:, None, 2], b[None, :, 2]) > np.maximum(a[:, None, 0], b[None, :, 0])) & (
        np.minimum(a[:, None, 3], b[None, :, 3]) > np.maximum(a[:, None, 1], b[None, :, 1])
    )


def _centre(box: np.ndarray) -> np.ndarray:
    return np.array([(box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0])
