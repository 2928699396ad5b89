"""Track ids across frames: the same object keeps the same id while it stays in view. No ROS.

    tracker = InstanceTracker(max_age_s=1.0, min_iou=0.3, max_age_frames=3)
    tracked = tracker.update(result, stamp_s)      # same instances, same order, each with a track_id

    tracker = Sam3Tracker(segmenter)               # or segment and track in one call
    tracked = tracker(image, ["car"], stamp_s)

How a frame is associated with the tracks alive before it:

1. Each track predicts where its object is now: its last box moved by a constant velocity (the
   smoothed motion of its box centre, in pixels per second) times the time since it was last
   seen. A camera pan moves every box the same way, so a track that has seen two frames follows
   the pan instead of losing its object; a new track starts with the scene's motion (the median
   velocity of the settled tracks), so objects entering during a pan are followed too.
2. A detection may only continue a track of the same prompt text. For each such pair whose
   predicted box overlaps the detection's box, the overlap of the masks is measured: the track's
   last mask crop, shifted by the predicted motion, against the detection's crop, counted only on
   the intersection of the two crop windows (never a full-size mask). Pairs whose IoU is below
   ``min_iou`` cannot match.
3. The pairs are assigned optimally (largest total IoU, scipy's linear_sum_assignment).
4. Detections and tracks left over are paired by distance, again optimally and within one
   prompt: a detection whose centre is within NEAR_GATE track sizes of the track's predicted or
   last centre, with a box area within a factor AREA_RATIO. This keeps objects that move more
   than their own width per frame, objects that come out from behind another on the far side,
   and tracks born during a pan that has changed since.
5. A matched track takes the detection's box, mask and motion (the motion only while the box
   keeps its size: a box shrinking behind an occluder moves its centre, not the object); every
   unmatched detection starts a new track with the next id of the tracker's ``TrackIdSpace``.
6. Only then do tracks age (never before the frame that could continue them): a track ends when
   it has gone unmatched both in at least ``max_age_frames`` consecutive frames of this tracker
   and for more than ``max_age_s`` of image time. Time alone would end every track of a slow
   engine (a processed frame every few seconds) before its next frame could continue it; frames
   alone would keep a fast camera's lost tracks for a fraction of a second only. With both, a
   fast camera keeps a lost object's id for ``max_age_s``, a slow one for ``max_age_frames``
   of its frames.

Ids come from a ``TrackIdSpace``: each id is given once during the space's life, whatever
tracker takes it, so trackers (cameras) sharing one space never give the same id twice, and
``reset()`` never brings an id back. A tracker made without one has its own, counting from 1.

Image time: the stamps passed to ``update``. A stamp at most ``STAMP_JUMP_BACK_S`` earlier than
the newest one seen is jitter (two publishers on one topic, a clock correction): the frame is
tracked as if stamped at the newest time. A larger step back is a new stream (a bag that loops):
the tracks restart, with new ids.

Why not a library: norfair takes custom distances but pins numpy < 2 (this package pins 2.4).
boxmot's and Roboflow's ByteTrack (``trackers``; supervision 0.31 no longer has one) match boxes
only, ignore the prompt, leave detections they have not confirmed without an id, and their recent
releases pull in opencv-python, which clashes with opencv-python-headless. The node must give
every detection an id, and masks separate crossing and overlapping objects that boxes cannot.
The benchmark (``python -m benchmarks --only tracking``) compares this tracker with ByteTrack
(trackers 2.1.0) on the same input.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.results import Instance, SegmentationResult

if TYPE_CHECKING:
    from tt_sam3_ros.core.segmenter import Sam3Segmenter

LOG = logging.getLogger(__name__)

DEFAULT_MAX_AGE_S = 1.0
#: A lost track lives through at least this many of its tracker's frames (and ``max_age_s``).
DEFAULT_MAX_AGE_FRAMES = 3
DEFAULT_MIN_IOU = 0.3
#: A stamp earlier than the newest one by more than this (seconds) restarts the tracks: a bag
#: that loops jumps back by its length, while jitter between two publishers or a clock
#: correction moves stamps by milliseconds.
STAMP_JUMP_BACK_S = 1.0
#: Intervals between processed frames kept for ``InstanceTracker.processed_interval_s``.
INTERVAL_WINDOW = 9
#: Weight of the newest measured velocity in the smoothed one (the rest is the previous estimate).
VELOCITY_GAIN = 0.6
#: Second stage: a detection may continue a track whose predicted or last centre is nearer than
#: this many track sizes (square root of its box area), if their box areas differ by less than
#: AREA_RATIO times.
NEAR_GATE = 1.5
AREA_RATIO = 2.0
#: A box whose area changes by more than this factor from one sighting to the next (an object
#: going behind another, or coming out) says little about motion: the velocity is kept.
MOTION_AREA_RATIO = 1.5
#: A cost above every feasible one (feasible costs are 1 - IoU, in [0, 1)).
_INFEASIBLE = 1e6


def check_tracking_settings(
    max_age_s: float, min_iou: float, max_age_frames: int = DEFAULT_MAX_AGE_FRAMES
) -> None:
    """Raise InputError unless max_age_s is finite and > 0, min_iou in (0, 1] and max_age_frames >= 1."""
    if not (math.isfinite(max_age_s) and max_age_s > 0.0):
        raise InputError(f"track_max_age_s must be a finite number of seconds above 0, got {max_age_s}")
    if not (math.isfinite(min_iou) and 0.0 < min_iou <= 1.0):
        raise InputError(f"track_min_iou must be in (0, 1], got {min_iou}")
    if isinstance(max_age_frames, bool) or int(max_age_frames) != max_age_frames or max_age_frames < 1:
        raise InputError(f"track_max_age_frames must be a whole number of frames >= 1, got {max_age_frames}")


class TrackIdSpace:
    """Track ids, each given once during the space's life, to every tracker that shares it.

    A node gives one space to the trackers of all its cameras (and to any other tracker it
    runs), so an id names one object across the whole node. Thread-safe: trackers on different
    threads may take ids at once.
    """

    def __init__(self, first: int = 1) -> None:
        self._lock = threading.Lock()
        self._next = int(first)

    def take(self, count: int) -> np.ndarray:
        """``count`` new ids (int64, consecutive, ascending), never given before by this space."""
        with self._lock:
            start = self._next
            self._next += int(count)
        return np.arange(start, start + int(count), dtype=np.int64)

    @property
    def last_given(self) -> int:
        """The largest id given so far (first - 1 before any)."""
        with self._lock:
            return self._next - 1


class _Tracks:
    """The tracks alive, one row each, as arrays: per frame the work is a few array operations.

    Masks are kept as the crop (and origin) of each track's last detection, never full size.
    """

    def __init__(self) -> None:
        self.ids = np.zeros(0, dtype=np.int64)
        self.prompts: list[str] = []
        self.boxes = np.zeros((0, 4))  # x1 y1 x2 y2 when last seen
        self.velocity = np.zeros((0, 2))  # box centre, pixels per second (x, y)
        self.last_seen_s = np.zeros(0)
        self.hits = np.zeros(0, dtype=np.int64)
        self.misses = np.zeros(0, dtype=np.int64)  # consecutive frames unmatched
        self.masks: list[np.ndarray] = []
        self.origins = np.zeros((0, 2), dtype=np.int64)  # (row, col) of each mask crop
        self.areas = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.prompts)

    def keep(self, kept: np.ndarray) -> None:
        """Keep only the rows where ``kept`` (bool) is true."""
        if kept.all():
            return
        for name in ("ids", "boxes", "velocity", "last_seen_s", "hits", "misses", "origins", "areas"):
            setattr(self, name, getattr(self, name)[kept])
        self.prompts = [p for p, k in zip(self.prompts, kept, strict=True) if k]
        self.masks = [m for m, k in zip(self.masks, kept, strict=True) if k]

    def add(self, ids, prompts, boxes, velocity, stamp_s, masks, origins, areas) -> None:
        """Append new tracks (seen once, at ``stamp_s``)."""
        self.ids = np.concatenate([self.ids, ids])
        self.prompts.extend(prompts)
        self.boxes = np.concatenate([self.boxes, boxes])
        self.velocity = np.concatenate([self.velocity, velocity])
        self.last_seen_s = np.concatenate([self.last_seen_s, np.full(len(ids), stamp_s)])
        self.hits = np.concatenate([self.hits, np.ones(len(ids), dtype=np.int64)])
        self.misses = np.concatenate([self.misses, np.zeros(len(ids), dtype=np.int64)])
        self.masks.extend(masks)
        self.origins = np.concatenate([self.origins, origins])
        self.areas = np.concatenate([self.areas, areas])


@dataclass(frozen=True)
class AgeingView:
    """How a tracker's ageing fits its stream, for /diagnostics (read from another thread).

    Attributes:
        processed_interval_s: median image time between its recent frames (None before two).
        max_age_s, max_age_frames: the ageing rule (a lost track lives both this long and this
            many of the tracker's frames).
        tracks_alive: tracks not yet aged out.
        warning: why ids may not hold on this stream ("" when ageing follows ``max_age_s``).
    """

    processed_interval_s: float | None
    max_age_s: float
    max_age_frames: int
    tracks_alive: int
    warning: str


class InstanceTracker:
    """Gives each instance of a stream of SegmentationResults a track id stable across frames.

    Args:
        max_age_s: image time a track survives unmatched (at least; see ``max_age_frames``).
        min_iou: the least mask overlap that continues a track.
        max_age_frames: frames of this tracker a track survives unmatched (at least).
        id_space: where new ids come from; share one between trackers whose ids must never
            collide (a node's cameras). A tracker of its own otherwise.
    """

    def __init__(
        self,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        min_iou: float = DEFAULT_MIN_IOU,
        max_age_frames: int = DEFAULT_MAX_AGE_FRAMES,
        id_space: TrackIdSpace | None = None,
    ) -> None:
        check_tracking_settings(max_age_s, min_iou, max_age_frames)
        self.max_age_s = float(max_age_s)
        self.min_iou = float(min_iou)
        self.max_age_frames = int(max_age_frames)
        self.id_space = id_space if id_space is not None else TrackIdSpace()
        self._tracks = _Tracks()
        self._last_stamp_s: float | None = None
        self._intervals: deque[float] = deque(maxlen=INTERVAL_WINDOW)
        # Guards _intervals and the track count against ``ageing()`` on a diagnostics thread.
        self._view_lock = threading.Lock()
        self._tracks_alive = 0
        # How the scene moved lately (pixels per second): a new track starts with it, so an
        # object that enters during a camera pan is predicted to move with the pan.
        self._scene_velocity = np.zeros(2)

    @property
    def track_count(self) -> int:
        """Tracks alive (not yet aged out by the rule of ``update``)."""
        return len(self._tracks)

    @property
    def processed_interval_s(self) -> float | None:
        """Median image time between the recent frames this tracker saw (None before two frames)."""
        with self._view_lock:
            intervals = list(self._intervals)
        return float(np.median(intervals)) if intervals else None

    def ageing(self) -> AgeingView:
        """The ageing rule against this stream's processed interval; safe from any thread."""
        with self._view_lock:
            alive = self._tracks_alive
        return AgeingView(
            self.processed_interval_s, self.max_age_s, self.max_age_frames, alive, self.ageing_warning()
        )

    def ageing_warning(self) -> str:
        """Why ids may not hold on this stream, or "" when ageing follows ``max_age_s``.

        Frames further apart than ``max_age_s`` leave the frame count in charge: a lost object
        keeps its id for ``max_age_frames`` frames (that many intervals), and an object that
        moves more than its own size between two frames gets a new id.
        """
        interval = self.processed_interval_s
        if interval is None or interval <= self.max_age_s:
            return ""
        return (
            f"processed frames are {interval:.1f} s apart, more than track_max_age_s {self.max_age_s:g}: "
            f"a lost object keeps its id for {self.max_age_frames} missed frames (track_max_age_frames) "
            f"(~{self.max_age_frames * interval:.0f} s), and one that moves more than its size between "
            "frames gets a new id"
        )

    def configure(self, max_age_s: float, min_iou: float, max_age_frames: int | None = None) -> None:
        """Change the settings; tracks alive stay alive and keep their ids."""
        frames = self.max_age_frames if max_age_frames is None else max_age_frames
        check_tracking_settings(max_age_s, min_iou, frames)
        self.max_age_s = float(max_age_s)
        self.min_iou = float(min_iou)
        self.max_age_frames = int(frames)

    def reset(self) -> None:
        """Forget every track. Ids already given are still never given again."""
        self._tracks = _Tracks()
        self._last_stamp_s = None
        with self._view_lock:
            self._intervals.clear()
            self._tracks_alive = 0
        self._scene_velocity = np.zeros(2)

    def forget_prompts(self, kept: list[str] | tuple[str, ...] | set[str]) -> None:
        """Drop the tracks of prompts not in ``kept`` (a prompt set changed)."""
        keep = set(kept)
        self._tracks.keep(np.array([p in keep for p in self._tracks.prompts], dtype=bool))

    def update(self, result: SegmentationResult, stamp_s: float) -> SegmentationResult:
        """Associate one frame with the tracks; return it with every instance's ``track_id`` set.

        The instances keep their order (so mask value k is still the k-th instance); only
        ``track_id`` changes. Tracks of prompts no longer in ``result.prompts`` are dropped.

        Args:
            result: one frame's instances.
            stamp_s: the frame's time in seconds (the image stamp). A stamp earlier than the
                newest seen by up to STAMP_JUMP_BACK_S counts as the newest (jitter); one
                further back (a replayed bag looping) starts the tracks afresh.

        Raises:
            InputError: ``stamp_s`` is not a finite number.
        """
        stamp_s = self._checked_stamp(stamp_s)
        self.forget_prompts(result.prompts)
        tracks = self._tracks

        instances = result.instances
        boxes = np.array([i.box for i in instances], dtype=np.float64).reshape(-1, 4)
        areas = np.array([np.count_nonzero(i.mask_crop) for i in instances], dtype=np.int64)
        rows, cols = self._associate(instances, boxes, areas, stamp_s)
        self._continue(rows, cols, instances, boxes, areas, stamp_s)
        ids = np.zeros(len(instances), dtype=np.int64)
        ids[rows] = tracks.ids[cols]
        self._age(cols, stamp_s)  # rows of ``tracks`` change here: ids are read above
        unmatched = np.ones(len(instances), dtype=bool)
        unmatched[rows] = False
        born = np.nonzero(unmatched)[0]
        if born.size:
            new_ids = self.id_space.take(born.size)
            ids[born] = new_ids
            tracks.add(
                new_ids,
                [instances[k].prompt for k in born],
                boxes[born],
                np.tile(self._scene_velocity, (born.size, 1)),
                stamp_s,
                [instances[k].mask_crop for k in born],
                np.array([instances[k].crop_origin for k in born], dtype=np.int64).reshape(-1, 2),
                areas[born],
            )
        with self._view_lock:
            self._tracks_alive = len(tracks)
        tracked = [i.with_track_id(int(t)) for i, t in zip(instances, ids, strict=True)]
        return dataclasses.replace(result, instances=tracked)

    def _checked_stamp(self, stamp_s: float) -> float:
        """The time to track this frame at: jitter clamped to the newest stamp, a jump back reset."""
        stamp_s = float(stamp_s)
        if not math.isfinite(stamp_s):
            raise InputError(f"frame stamp must be a finite number of seconds, got {stamp_s}")
        last = self._last_stamp_s
        if last is not None and stamp_s < last:
            if last - stamp_s > STAMP_JUMP_BACK_S:
                LOG.info("frame time went back %.3f s: tracks restarted", last - stamp_s)
                self.reset()
                last = None
            else:
                stamp_s = last
        if last is not None:
            with self._view_lock:
                self._intervals.append(stamp_s - last)
        self._last_stamp_s = stamp_s
        return stamp_s

    def _age(self, matched: np.ndarray, stamp_s: float) -> None:
        """After association: count a miss on every track left unmatched, end the ones past both ages."""
        tracks = self._tracks
        missed = np.ones(len(tracks), dtype=bool)
        missed[matched] = False
        tracks.misses[missed] += 1
        tracks.misses[~missed] = 0
        expired = (tracks.misses >= self.max_age_frames) & (stamp_s - tracks.last_seen_s > self.max_age_s)
        tracks.keep(~expired)

    def _associate(
        self, instances: list[Instance], boxes: np.ndarray, areas: np.ndarray, stamp_s: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(detection rows, track rows) of the optimal feasible pairs."""
        tracks = self._tracks
        none = np.zeros(0, dtype=np.int64)
        if not instances or not len(tracks):
            return none, none
        shifts = tracks.velocity * (stamp_s - tracks.last_seen_s)[:, None]
        predicted = tracks.boxes + np.concatenate([shifts, shifts], axis=1)
        codes = {prompt: code for code, prompt in enumerate(dict.fromkeys(tracks.prompts))}
        det_codes = np.array([codes.get(i.prompt, -1) for i in instances])
        trk_codes = np.array([codes[p] for p in tracks.prompts])
        candidates_by_prompt = det_codes[:, None] == trk_codes[None, :]
        candidates = _boxes_overlap(boxes, predicted) & candidates_by_prompt
        cost = np.full(candidates.shape, _INFEASIBLE)
        # Python lists in the loop below: indexing numpy arrays element by element costs more.
        moved = (tracks.origins + np.rint(shifts[:, ::-1]).astype(np.int64)).tolist()  # (row, col)
        det_areas, trk_areas = areas.tolist(), tracks.areas.tolist()
        pairs = np.nonzero(candidates)
        for k, j in zip(pairs[0].tolist(), pairs[1].tolist(), strict=True):
            instance = instances[k]
            if det_areas[k] and trk_areas[j]:
                iou = crop_iou(
                    instance.mask_crop,
                    instance.crop_origin,
                    det_areas[k],
                    tracks.masks[j],
                    moved[j],
                    trk_areas[j],
                )
            else:  # a detection without mask pixels is matched on its box
                iou = box_iou(boxes[k], predicted[j])
            if iou >= self.min_iou:
                cost[k, j] = 1.0 - iou
        rows, cols = _assign(cost)
        near_rows, near_cols = self._associate_near(boxes, predicted, candidates_by_prompt, rows, cols)
        return np.concatenate([rows, near_rows]), np.concatenate([cols, near_cols])

    def _associate_near(
        self,
        boxes: np.ndarray,
        predicted: np.ndarray,
        same_prompt: np.ndarray,
        rows: np.ndarray,
        cols: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Second stage: leftover detections and tracks of one prompt paired by distance.

        Catches what the overlap stage cannot: a track whose motion is not known yet (born during
        a pan that has since changed) or went wrong (its object was half hidden), and an object
        that comes out from behind another on the far side. The distance from a detection's
        centre to the nearer of the track's predicted and last centres, in units of the track's
        size, must be below NEAR_GATE, and the two boxes' areas within a factor AREA_RATIO.
        """
        tracks = self._tracks
        free_det = np.ones(len(boxes), dtype=bool)
        free_det[rows] = False
        free_trk = np.ones(len(tracks), dtype=bool)
        free_trk[cols] = False
        det_index, trk_index = np.nonzero(free_det)[0], np.nonzero(free_trk)[0]
        none = np.zeros(0, dtype=np.int64)
        if not det_index.size or not trk_index.size:
            return none, none
        det = boxes[det_index]
        centres = _centres(det)[:, None, :]
        to_predicted = np.linalg.norm(centres - _centres(predicted[trk_index])[None], axis=2)
        to_last = np.linalg.norm(centres - _centres(tracks.boxes[trk_index])[None], axis=2)
        track_area = np.maximum(_areas(tracks.boxes[trk_index]), 1.0)
        distance = np.minimum(to_predicted, to_last) / np.sqrt(track_area)[None, :]
        ratio = np.maximum(_areas(det), 1.0)[:, None] / track_area[None, :]
        feasible = (
            same_prompt[np.ix_(det_index, trk_index)]
            & (distance < NEAR_GATE)
            & (ratio < AREA_RATIO)
            & (ratio > 1.0 / AREA_RATIO)
        )
        cost = np.where(feasible, distance, _INFEASIBLE)
        near_rows, near_cols = _assign(cost)
        return det_index[near_rows], trk_index[near_cols]

    def _continue(
        self,
        rows: np.ndarray,
        cols: np.ndarray,
        instances: list[Instance],
        boxes: np.ndarray,
        areas: np.ndarray,
        stamp_s: float,
    ) -> None:
        """Move matched tracks (rows ``cols``) to their detections (``rows``): box, mask, motion."""
        if not rows.size:
            return
        tracks = self._tracks
        elapsed = stamp_s - tracks.last_seen_s[cols]
        measured = (_centres(boxes[rows]) - _centres(tracks.boxes[cols])) / np.maximum(elapsed, 1e-9)[:, None]
        unknown = (tracks.hits[cols] == 1) & ~tracks.velocity[cols].any(axis=1)
        gain = np.where(unknown, 1.0, VELOCITY_GAIN)[:, None]
        smoothed = gain * measured + (1.0 - gain) * tracks.velocity[cols]
        change = np.maximum(_areas(boxes[rows]), 1.0) / np.maximum(_areas(tracks.boxes[cols]), 1.0)
        steady = (change < MOTION_AREA_RATIO) & (change > 1.0 / MOTION_AREA_RATIO)
        trusted = (elapsed > 0.0) & (steady | (tracks.hits[cols] == 1))
        tracks.velocity[cols] = np.where(trusted[:, None], smoothed, tracks.velocity[cols])
        tracks.boxes[cols] = boxes[rows]
        tracks.last_seen_s[cols] = stamp_s
        tracks.hits[cols] += 1
        tracks.areas[cols] = areas[rows]
        tracks.origins[cols] = np.array([instances[k].crop_origin for k in rows], dtype=np.int64)
        for k, j in zip(rows.tolist(), cols.tolist(), strict=True):
            tracks.masks[j] = instances[k].mask_crop
        settled = tracks.hits[cols] > 2
        if settled.any():
            self._scene_velocity = np.median(tracks.velocity[cols][settled], axis=0)


def crop_iou(
    crop_a: np.ndarray,
    origin_a: Sequence[int],
    area_a: int,
    crop_b: np.ndarray,
    origin_b: Sequence[int],
    area_b: int,
) -> float:
    """IoU of two masks given as crops at (row, col) origins, counted on the windows' intersection.

    ``area_a`` and ``area_b`` are the crops' pixel counts (passed in: each is counted once per frame).
    """
    union_base = area_a + area_b
    if union_base == 0:
        return 0.0
    # Plain comparisons, not min()/max(): this runs for every candidate pair of every frame.
    (row_a, col_a), (row_b, col_b) = origin_a, origin_b
    (height_a, width_a), (height_b, width_b) = crop_a.shape, crop_b.shape
    row0 = row_a if row_a > row_b else row_b
    col0 = col_a if col_a > col_b else col_b
    row1 = row_a + height_a if row_a + height_a < row_b + height_b else row_b + height_b
    col1 = col_a + width_a if col_a + width_a < col_b + width_b else col_b + width_b
    if row1 <= row0 or col1 <= col0:
        return 0.0
    window_a = crop_a[row0 - row_a : row1 - row_a, col0 - col_a : col1 - col_a]
    window_b = crop_b[row0 - row_b : row1 - row_b, col0 - col_b : col1 - col_b]
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


def _assign(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the optimal assignment, without the infeasible pairs."""
    # Imported here: scipy.optimize takes 0.3 s or more to import, which `tt-sam3 --help` and
    # an untracked node need not pay.
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(cost)
    feasible = cost[rows, cols] < _INFEASIBLE
    return rows[feasible], cols[feasible]


def _areas(boxes: np.ndarray) -> np.ndarray:
    """(N,) areas of (N, 4) x1 y1 x2 y2 boxes."""
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def _centres(boxes: np.ndarray) -> np.ndarray:
    """(N, 2) centres (x, y) of (N, 4) x1 y1 x2 y2 boxes."""
    return (boxes[:, :2] + boxes[:, 2:]) / 2.0


class Sam3Tracker:
    """SAM 3 over a sequence of frames: each frame segmented, each instance given its track id.

        with Sam3Segmenter.from_pretrained() as segmenter:
            tracker = Sam3Tracker(segmenter)
            for index, frame in enumerate(frames):
                result = tracker(frame, ["car"], stamp_s=index / fps)
                ids = [i.track_id for i in result.instances]

    The segmenter stays the caller's (open and close it as usual); the tracker only holds the
    tracks. Prompts may change between frames: the tracks of a prompt that is dropped die with it.
    """

    def __init__(
        self,
        segmenter: Sam3Segmenter,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        min_iou: float = DEFAULT_MIN_IOU,
        max_age_frames: int = DEFAULT_MAX_AGE_FRAMES,
        id_space: TrackIdSpace | None = None,
    ):
        self.segmenter = segmenter
        self.tracker = InstanceTracker(max_age_s, min_iou, max_age_frames, id_space)

    def __call__(
        self,
        image: object,
        prompts: list[str],
        stamp_s: float,
        threshold: float = 0.5,
        max_instances: int = 50,
    ) -> SegmentationResult:
        """Segment ``image`` (see ``Sam3Segmenter.__call__``) and track its instances at ``stamp_s``."""
        result = self.segmenter(image, prompts, threshold=threshold, max_instances=max_instances)
        return self.tracker.update(result, stamp_s)

    def reset(self) -> None:
        """Forget the tracks (a new video); ids given so far are never given again."""
        self.tracker.reset()
