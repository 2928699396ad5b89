"""Tracking section: identity quality against ground truth, and the tracker's cost per frame.

Synthetic sequences with ground truth: elliptic objects of three prompts move (with turns),
cross and occlude each other (a depth order decides who is in front; a hidden part is not
seen), enter and leave the frame, and in some sequences the camera pans with a speed that
rises and falls. One scenario is a slow engine's: parked and slowly moving objects, processed
frames 1-10 s apart (a CPU, or many cameras on one engine). A simulated detector turns each
frame into canned instances the way SAM 3 reports them (modal boxes and masks of what is
visible) with noise: missed detections, box and mask jitter, false positives of random
prompts, scores just above the threshold.

Every tracker gets the same detections:
- ours: ``tt_sam3_ros.core.tracking.InstanceTracker`` (mask IoU on crops, prompt gate, motion);
- greedy IoU: boxes of the same prompt matched greedily by IoU, no motion, same ages;
- ByteTrack (Roboflow's ``trackers``, a Kalman filter on boxes, two score tiers): as shipped
  (class-agnostic) and one tracker per prompt; detections it leaves without an id are not
  output, as a user of it gets them;
- oracle: the true id on every true detection and a fresh id on each false positive, the
  ceiling any tracker that labels these detections can reach.

Scored with py-motmetrics (boxes matched at IoU >= 0.5): IDF1, MOTA and ID switches against
every visible object ("all"), and IDF1 on association alone ("assoc": ground truth restricted to
the objects the detector found, output to its true detections), which the detector's misses and
false positives cannot lower. With a fraction m of visible objects missed, "all" IDF1 is at
most 2(1 - m) / (2 - m) for any tracker (0.947 at m = 0.1): the oracle row shows the real ceiling.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version

import cv2
import numpy as np

from tt_sam3_ros.core.results import Instance, SegmentationResult
from tt_sam3_ros.core.tracking import DEFAULT_MAX_AGE_FRAMES, InstanceTracker

from ..common import report

PROMPTS = ("car", "person", "dog")
FPS = 15.0
THRESHOLD = 0.5
MAX_AGE_S = 1.0
MIN_IOU = 0.3
#: A visible object is in the ground truth when at least this much of it shows.
MIN_VISIBLE = 0.25

FULL = {"frames": 150, "seeds": 3, "cost_frames": 300, "size": (720, 1280)}
QUICK = {"frames": 30, "seeds": 1, "cost_frames": 20, "size": (360, 640)}


@dataclass(frozen=True)
class Scenario:
    """How a sequence is made."""

    name: str
    objects: int
    pan_px_per_frame: float  # peak camera speed
    lanes: bool = False  # objects of one prompt walk in two opposite lanes (many crossings)
    speed_px_s: tuple[float, float] = (30.0, 250.0)  # range of the objects' speeds
    wobble_px: float = 40.0  # largest amplitude of an object's turns
    #: Processed frames this far apart (seconds, uniform), as a slow engine takes them; None:
    #: every frame of a 15 fps camera.
    gap_s: tuple[float, float] | None = None


SCENARIOS = (
    Scenario("street, still camera", 14, 0.0),
    Scenario("two crossing lanes", 12, 0.0, lanes=True),
    Scenario("street, camera panning (peak 25 px/frame)", 14, 25.0),
    Scenario("street, fast pan (peak 50 px/frame)", 14, 50.0),
    # A slow engine (a CPU, or many cameras on one engine): a scene of parked and slowly moving
    # objects, processed once every 1-10 s.
    Scenario(
        "slow engine: frames 1-10 s apart, objects at 0-15 px/s",
        14,
        0.0,
        speed_px_s=(0.0, 15.0),
        wobble_px=5.0,
        gap_s=(1.0, 10.0),
    ),
)


@dataclass
class Body:
    """One ground-truth object, in world pixels."""

    gid: int
    prompt: str
    semi_axes: tuple[float, float]
    depth: float
    start: np.ndarray
    velocity: np.ndarray  # world px per second
    wobble: tuple[float, float, float]  # amplitude px, angular speed rad/s, phase
    first_frame: int
    last_frame: int

    def centre(self, t: float) -> np.ndarray:
        amp, omega, phase = self.wobble
        turn = amp * np.array([math.sin(omega * t + phase), math.cos(0.7 * omega * t + phase)])
        return self.start + self.velocity * t + turn


@dataclass
class Detection:
    """One canned instance and where it came from (a ground-truth id, or None: a false positive)."""

    instance: Instance
    gid: int | None


@dataclass
class Frame:
    stamp_s: float
    truth: dict[int, tuple[float, float, float, float]]  # gid -> visible box
    detections: list[Detection] = field(default_factory=list)


def ellipse_crop(centre: np.ndarray, semi_axes: tuple[float, float], size: tuple[int, int]):
    """(bool crop, (row, col) origin, unclipped area) of an axis-aligned ellipse, clipped to the image."""
    a, b = semi_axes
    x1, y1 = max(0, int(centre[0] - a)), max(0, int(centre[1] - b))
    x2, y2 = min(size[1], math.ceil(centre[0] + a)), min(size[0], math.ceil(centre[1] + b))
    full_area = math.pi * a * b
    if x2 <= x1 or y2 <= y1:
        return np.zeros((0, 0), bool), (0, 0), full_area
    rows, cols = np.ogrid[y1:y2, x1:x2]
    crop = ((cols + 0.5 - centre[0]) / a) ** 2 + ((rows + 0.5 - centre[1]) / b) ** 2 <= 1.0
    return crop, (y1, x1), full_area


def frame_times(scenario: Scenario, frames: int, seed: int) -> np.ndarray:
    """Each processed frame's stamp (s): 15 fps, or a slow engine's random gaps (own generator, so
    the other draws of a sequence do not depend on it)."""
    if scenario.gap_s is None:
        return np.arange(frames) / FPS
    gaps = np.random.default_rng(seed + 7_000_000).uniform(*scenario.gap_s, frames - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def make_bodies(
    scenario: Scenario, frames: int, size: tuple[int, int], rng: np.random.Generator, times: np.ndarray
):
    height, width = size
    bodies = []
    for gid in range(1, scenario.objects + 1):
        prompt = "person" if scenario.lanes else PROMPTS[int(rng.integers(len(PROMPTS)))]
        a = float(rng.uniform(18, 60))
        semi = (a, a * float(rng.uniform(0.6, 1.6)))
        first = int(rng.integers(0, frames // 2))
        if scenario.lanes:
            direction = 1.0 if gid % 2 else -1.0
            start_x = -a if direction > 0 else width + a
            lane_y = height * (0.45 if direction > 0 else 0.55)
            start = np.array([start_x, lane_y + rng.uniform(-20, 20)])
            velocity = np.array([direction * rng.uniform(80, 220), rng.uniform(-10, 10)])
        else:
            start = np.array([rng.uniform(0, width), rng.uniform(0, height)])
            speed, angle = rng.uniform(*scenario.speed_px_s), rng.uniform(0, 2 * math.pi)
            velocity = speed * np.array([math.cos(angle), math.sin(angle)])
        wobble = (
            float(rng.uniform(0, scenario.wobble_px)),
            float(rng.uniform(0.5, 2.0)),
            float(rng.uniform(0, 6.3)),
        )
        last = min(frames - 1, first + int(rng.integers(frames // 3, frames)))
        start = start - velocity * times[first]  # so the object is at ``start`` when it appears
        bodies.append(Body(gid, prompt, semi, float(rng.uniform()), start, velocity, wobble, first, last))
    return bodies


def camera_offset(scenario: Scenario, t: float, seconds: float) -> np.ndarray:
    """World -> image shift at time t: a pan whose speed rises and falls (and reverses)."""
    if scenario.pan_px_per_frame == 0.0:
        return np.zeros(2)
    peak = scenario.pan_px_per_frame * FPS  # px per second
    omega = 2 * math.pi / seconds
    # x speed = peak * sin(omega t); y drifts a little.
    return np.array([peak * (1 - math.cos(omega * t)) / omega, 0.1 * peak * math.sin(omega * t) / omega])


def jitter_mask(crop: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The mask grown or shrunk by up to 2 pixels at its border, as a segmenter's edges wander."""
    step = int(rng.integers(-2, 3))
    if step == 0 or crop.size == 0:
        return crop
    kernel = np.ones((3, 3), np.uint8)
    padded = np.pad(crop.astype(np.uint8), 2)
    changed = (cv2.dilate if step > 0 else cv2.erode)(padded, kernel, iterations=abs(step))
    return changed[2:-2, 2:-2].astype(bool)


def detect(
    instance_parts, size, stamp_s, rng: np.random.Generator, miss_rate: float, fp_rate: float
) -> list[Detection]:
    """The simulated detector: each visible object found with probability 1 - miss_rate, noisy."""
    detections = []
    for gid, prompt, crop, origin in instance_parts:
        if rng.uniform() < miss_rate:
            continue
        rows, cols = np.nonzero(crop)
        x1, x2 = origin[1] + cols.min(), origin[1] + cols.max() + 1
        y1, y2 = origin[0] + rows.min(), origin[0] + rows.max() + 1
        side = max(x2 - x1, y2 - y1)
        box = np.array([x1, y1, x2, y2], float) + rng.normal(0, 0.03 * side, 4)
        box = np.clip(box, 0, [size[1], size[0], size[1], size[0]])
        shift = rng.integers(-1, 2, 2)
        mask_origin = (max(0, origin[0] + int(shift[0])), max(0, origin[1] + int(shift[1])))
        score = float(rng.uniform(THRESHOLD, THRESHOLD + 0.3))
        instance = Instance(
            prompt, PROMPTS.index(prompt), score, tuple(box), jitter_mask(crop, rng), mask_origin, size
        )
        detections.append(Detection(instance, gid))
    for _ in range(rng.poisson(fp_rate * max(1, len(instance_parts)))):
        centre = rng.uniform([0, 0], [size[1], size[0]])
        semi = (float(rng.uniform(15, 50)), float(rng.uniform(15, 50)))
        crop, origin, _ = ellipse_crop(centre, semi, size)
        if not crop.any():
            continue
        box = (origin[1], origin[0], origin[1] + crop.shape[1], origin[0] + crop.shape[0])
        prompt = PROMPTS[int(rng.integers(len(PROMPTS)))]
        score = float(rng.uniform(THRESHOLD, THRESHOLD + 0.1))
        instance = Instance(prompt, PROMPTS.index(prompt), score, tuple(map(float, box)), crop, origin, size)
        detections.append(Detection(instance, None))
    detections.sort(key=lambda d: -d.instance.score)
    return detections


def make_sequence(
    scenario: Scenario, frames: int, size: tuple[int, int], seed: int, miss_rate=0.1, fp_rate=0.05
) -> list[Frame]:
    """Ground truth and noisy detections, frame by frame."""
    rng = np.random.default_rng(seed)
    times = frame_times(scenario, frames, seed)
    bodies = make_bodies(scenario, frames, size, rng, times)
    sequence = []
    for index in range(frames):
        t = float(times[index])
        offset = camera_offset(scenario, t, frames / FPS)
        drawn = []  # (depth, body, crop, origin, full area), nearest first
        for body in bodies:
            if body.first_frame <= index <= body.last_frame:
                crop, origin, full_area = ellipse_crop(body.centre(t) - offset, body.semi_axes, size)
                if crop.any():
                    drawn.append((body.depth, body, crop, origin, full_area))
        drawn.sort(key=lambda item: item[0])
        parts, truth = [], {}
        for k, (_, body, crop, origin, full_area) in enumerate(drawn):
            visible = crop.copy()
            for _, _, front, front_origin, _ in drawn[:k]:
                _hide(visible, origin, front, front_origin)
            if visible.sum() < MIN_VISIBLE * full_area:
                continue
            rows, cols = np.nonzero(visible)
            box = (
                float(origin[1] + cols.min()),
                float(origin[0] + rows.min()),
                float(origin[1] + cols.max() + 1),
                float(origin[0] + rows.max() + 1),
            )
            truth[body.gid] = box
            parts.append((body.gid, body.prompt, visible, origin))
        sequence.append(Frame(t, truth, detect(parts, size, t, rng, miss_rate, fp_rate)))
    return sequence


def _hide(visible: np.ndarray, origin, front: np.ndarray, front_origin) -> None:
    """Clear the pixels of ``visible`` that ``front`` (nearer the camera) covers."""
    row0, col0 = max(origin[0], front_origin[0]), max(origin[1], front_origin[1])
    row1 = min(origin[0] + visible.shape[0], front_origin[0] + front.shape[0])
    col1 = min(origin[1] + visible.shape[1], front_origin[1] + front.shape[1])
    if row1 <= row0 or col1 <= col0:
        return
    window = visible[row0 - origin[0] : row1 - origin[0], col0 - origin[1] : col1 - origin[1]]
    window &= ~front[
        row0 - front_origin[0] : row1 - front_origin[0], col0 - front_origin[1] : col1 - front_origin[1]
    ]


# --- the trackers under test: each maps a frame's detections to [(detection index, id)] ---

Output = list[tuple[int, int]]


class Ours:
    name = "ours (InstanceTracker: masks + motion)"

    def __init__(self, size):
        self.tracker = InstanceTracker(max_age_s=MAX_AGE_S, min_iou=MIN_IOU)
        self.size = size

    def __call__(self, frame: Frame) -> Output:
        result = SegmentationResult(self.size, list(PROMPTS), [d.instance for d in frame.detections], {})
        tracked = self.tracker.update(result, frame.stamp_s)
        return [(k, i.track_id) for k, i in enumerate(tracked.instances)]


class Greedy:
    """Boxes of one prompt, matched greedily by IoU to the tracks' last boxes; no motion."""

    name = "greedy IoU (boxes, same prompt)"

    def __init__(self, size):
        self.tracks: dict[int, tuple[str, np.ndarray, float]] = {}
        self.next_id = 1

    def __call__(self, frame: Frame) -> Output:
        self.tracks = {i: t for i, t in self.tracks.items() if frame.stamp_s - t[2] <= MAX_AGE_S}
        pairs = []
        for k, detection in enumerate(frame.detections):
            box = np.array(detection.instance.box)
            for track_id, (prompt, last, _) in self.tracks.items():
                if prompt == detection.instance.prompt:
                    iou = _iou(box, last)
                    if iou >= MIN_IOU:
                        pairs.append((iou, k, track_id))
        taken_det, taken_track, out = set(), set(), []
        for _, k, track_id in sorted(pairs, reverse=True):
            if k not in taken_det and track_id not in taken_track:
                taken_det.add(k)
                taken_track.add(track_id)
                out.append((k, track_id))
        for k in range(len(frame.detections)):
            if k not in taken_det:
                out.append((k, self.next_id))
                self.next_id += 1
        for k, track_id in out:
            instance = frame.detections[k].instance
            self.tracks[track_id] = (instance.prompt, np.array(instance.box), frame.stamp_s)
        return out


def bytetrack_installed() -> bool:
    """Whether Roboflow's trackers can be imported; it needs numpy >= 2, so only the numpy2 platform
    row installs it (requirements/bench-numpy2.txt). Without it the benchmark says so and runs the
    other trackers."""
    if importlib.util.find_spec("trackers") is not None:
        return True
    print("ByteTrack not run: Roboflow's trackers is not installed (it needs numpy >= 2: PLATFORM=numpy2)")
    return False


class ByteTrack:
    """Roboflow trackers' ByteTrackTracker; ``per_prompt`` runs one per prompt (a prompt gate)."""

    def __init__(self, size, per_prompt: bool = False):
        import trackers

        def make():
            return trackers.ByteTrackTracker(
                lost_track_buffer=int(MAX_AGE_S * FPS),
                frame_rate=FPS,
                track_activation_threshold=THRESHOLD + 0.05,
                minimum_consecutive_frames=1,
                high_conf_det_threshold=THRESHOLD + 0.1,
            )

        self.per_prompt = per_prompt
        self.trackers = {p: make() for p in PROMPTS} if per_prompt else {None: make()}
        self.name = f"ByteTrack (trackers {version('trackers')}{', one per prompt' if per_prompt else ''})"

    def __call__(self, frame: Frame) -> Output:
        import supervision as sv

        out = []
        for key, tracker in self.trackers.items():
            chosen = [k for k, d in enumerate(frame.detections) if key is None or d.instance.prompt == key]
            boxes = np.array([frame.detections[k].instance.box for k in chosen], float).reshape(-1, 4)
            detections = sv.Detections(
                xyxy=boxes,
                confidence=np.array([frame.detections[k].instance.score for k in chosen], float),
                class_id=np.array([frame.detections[k].instance.prompt_index for k in chosen], int),
                data={"index": np.array(chosen, int)},
            )
            tracked = tracker.update(detections)
            offset = 0 if key is None else 1_000_000 * PROMPTS.index(key)
            for index, track_id in zip(tracked.data.get("index", []), tracked.tracker_id, strict=True):
                if track_id >= 0:
                    out.append((int(index), offset + int(track_id)))
        return out


class Oracle:
    name = "oracle (true ids on these detections)"

    def __init__(self, size):
        self.next_fp = 10_000_000

    def __call__(self, frame: Frame) -> Output:
        out = []
        for k, detection in enumerate(frame.detections):
            if detection.gid is None:
                out.append((k, self.next_fp))
                self.next_fp += 1
            else:
                out.append((k, detection.gid))
        return out


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def distances(truth: np.ndarray, hyps: np.ndarray) -> np.ndarray:
    """1 - IoU of every ground-truth box with every output box; NaN below IoU 0.5 (no match).

    Written here because motmetrics 1.4.0's iou_matrix calls np.asfarray, gone in numpy 2.
    """
    if len(truth) == 0 or len(hyps) == 0:
        return np.empty((len(truth), len(hyps)))
    lo = np.maximum(truth[:, None, :2], hyps[None, :, :2])
    hi = np.minimum(truth[:, None, 2:], hyps[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=2)
    area_t = np.prod(truth[:, 2:] - truth[:, :2], axis=1)
    area_h = np.prod(hyps[:, 2:] - hyps[:, :2], axis=1)
    iou = inter / (area_t[:, None] + area_h[None, :] - inter)
    return np.where(iou >= 0.5, 1.0 - iou, np.nan)


@dataclass
class Run:
    """One tracker over every sequence: a motmetrics accumulator per sequence, for both scorings."""

    name: str
    every: list = field(default_factory=list)
    assoc: list = field(default_factory=list)


def run_tracker(make_tracker: Callable, sequences: list[list[Frame]], size) -> Run:
    """Feed each sequence to a fresh tracker and accumulate its matches against the truth."""
    import motmetrics as mm

    run = Run(make_tracker(size).name)
    for sequence in sequences:
        tracker = make_tracker(size)
        acc_all, acc_assoc = mm.MOTAccumulator(auto_id=True), mm.MOTAccumulator(auto_id=True)
        for frame in sequence:
            output = tracker(frame)
            gids = list(frame.truth)
            truth = np.array([frame.truth[g] for g in gids]).reshape(-1, 4)
            hyp_ids = [track_id for _, track_id in output]
            hyp_boxes = np.array([frame.detections[k].instance.box for k, _ in output]).reshape(-1, 4)
            acc_all.update(gids, hyp_ids, distances(truth, hyp_boxes))
            found = {d.gid for d in frame.detections if d.gid is not None}
            true_out = [(k, i) for k, i in output if frame.detections[k].gid is not None]
            found_ids = [g for g in gids if g in found]
            found_truth = np.array([frame.truth[g] for g in found_ids]).reshape(-1, 4)
            true_boxes = np.array([frame.detections[k].instance.box for k, _ in true_out]).reshape(-1, 4)
            acc_assoc.update(found_ids, [i for _, i in true_out], distances(found_truth, true_boxes))
        run.every.append(acc_all)
        run.assoc.append(acc_assoc)
    return run


def scores(run: Run, chosen: list[int]) -> dict:
    """motmetrics' figures pooled over the sequences ``chosen``, and the IDF1 on association."""
    import motmetrics as mm

    metrics = mm.metrics.create()
    names = [str(i) for i in chosen]
    summary = metrics.compute_many(
        [run.every[i] for i in chosen],
        metrics=["idf1", "mota", "num_switches", "num_false_positives", "num_misses", "num_objects"],
        names=names,
        generate_overall=True,
    )
    assoc = metrics.compute_many(
        [run.assoc[i] for i in chosen], metrics=["idf1"], names=names, generate_overall=True
    )
    overall = summary.loc["OVERALL"].to_dict()
    overall["assoc_idf1"] = float(assoc.loc["OVERALL", "idf1"])
    return overall


def reentries(sequences: list[list[Frame]]) -> int:
    """Objects seen again after being out of sight longer than a track lives: more than the max age
    and in at least DEFAULT_MAX_AGE_FRAMES frames (only re-identification keeps these)."""
    count = 0
    for sequence in sequences:
        last: dict[int, tuple[int, float]] = {}  # gid -> (frame index, stamp) when last in view
        for index, frame in enumerate(sequence):
            for gid in frame.truth:
                if gid in last:
                    seen_index, seen_s = last[gid]
                    missed = index - seen_index - 1
                    count += missed >= DEFAULT_MAX_AGE_FRAMES and frame.stamp_s - seen_s > MAX_AGE_S
                last[gid] = (index, frame.stamp_s)
    return count


def quality_table(settings: dict, miss_rate: float, fp_rate: float) -> None:
    size = settings["size"]
    seeds = settings["seeds"]
    sequences = [
        make_sequence(
            scenario, settings["frames"], size, 1000 * i + seed, miss_rate=miss_rate, fp_rate=fp_rate
        )
        for i, scenario in enumerate(SCENARIOS)
        for seed in range(seeds)
    ]
    makers = [Ours, Greedy, ByteTrack, lambda s: ByteTrack(s, per_prompt=True), Oracle]
    if not bytetrack_installed():
        makers = [Ours, Greedy, Oracle]
    runs = [run_tracker(make, sequences, size) for make in makers]
    everything = list(range(len(sequences)))
    rows = []
    for run in runs:
        overall = scores(run, everything)
        rows.append(
            [
                run.name,
                f"{overall['idf1']:.3f}",
                f"{overall['assoc_idf1']:.3f}",
                f"{overall['mota']:.3f}",
                int(overall["num_switches"]),
                int(overall["num_false_positives"]),
                int(overall["num_misses"]),
            ]
        )
    frames = sum(len(s) for s in sequences)
    report.title(f"tracking: identity, {miss_rate:.0%} missed detections, {fp_rate:.0%} false positives")
    print(
        f"{len(sequences)} sequences ({seeds} seeds per scenario), {frames} frames at {FPS:.0f} fps "
        "(the slow engine's: 1-10 s apart), "
        f"{size[1]}x{size[0]}, {int(overall['num_objects'])} visible object-frames, "
        f"{reentries(sequences)} re-entries after more than {MAX_AGE_S} s and {DEFAULT_MAX_AGE_FRAMES} "
        "frames out of sight\n"
        f"detector noise: {miss_rate:.0%} missed, box jitter 3 % of the side, mask border +-2 px and "
        f"shift +-1 px, {fp_rate:.0%} false positives, scores in [{THRESHOLD}, {THRESHOLD + 0.3}]\n"
        f"max age {MAX_AGE_S} s, min IoU {MIN_IOU} (ours, greedy); ByteTrack: buffer {int(MAX_AGE_S * FPS)} "
        f"frames, activation {THRESHOLD + 0.05}, high tier {THRESHOLD + 0.1}; 'all': against every visible "
        "object; 'assoc': found objects and true detections only"
    )
    report.table(["tracker", "IDF1 all", "IDF1 assoc", "MOTA", "ID switches", "FP", "misses"], rows)
    by_scenario = []
    for i, scenario in enumerate(SCENARIOS):
        chosen = list(range(i * seeds, (i + 1) * seeds))
        cells = [scores(run, chosen) for run in runs]
        by_scenario.append([scenario.name, *(f"{c['idf1']:.3f} / {c['assoc_idf1']:.3f}" for c in cells)])
    print("IDF1 all / assoc by scenario")
    report.table(["scenario", *(run.name.split(" (")[0] + _variant(run.name) for run in runs)], by_scenario)


def _variant(name: str) -> str:
    return " per prompt" if "per prompt" in name else ""


def cost_frames(
    count: int, frames: int, size: tuple[int, int], seed: int = 7, semi_axes=(15, 80)
) -> list[Frame]:
    """``count`` objects that stay in a 1080p view and move, with the detector's jitter (no misses)."""
    rng = np.random.default_rng(seed)
    height, width = size
    centres = rng.uniform([100, 100], [width - 100, height - 100], (count, 2))
    velocity = rng.uniform(-150, 150, (count, 2))
    semi = rng.uniform(*semi_axes, (count, 2))
    sequence = []
    for index in range(frames):
        t = index / FPS
        parts = []
        for k in range(count):
            centre = _bounce(
                centres[k] + velocity[k] * t,
                np.array([100.0, 100.0]),
                np.array([width - 100.0, height - 100.0]),
            )
            crop, origin, _ = ellipse_crop(centre, tuple(semi[k]), size)
            parts.append((k, PROMPTS[k % 3], crop, origin))
        sequence.append(Frame(t, {}, detect(parts, size, t, rng, 0.0, 0.0)))
    return sequence


def _bounce(position: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``position`` folded back into [low, high], as a ball bouncing off the walls."""
    span = high - low
    folded = (position - low) % (2 * span)
    return low + np.where(folded < span, folded, 2 * span - folded)


def cost_table(settings: dict) -> None:
    size = (1080, 1920)
    rows = []
    makers = (Ours, Greedy, ByteTrack) if bytetrack_installed() else (Ours, Greedy)
    # 255 objects as large as the 50 would cover the whole frame: they are made smaller.
    for count, semi_axes in ((50, (15, 80)), (255, (8, 40))):
        sequence = cost_frames(count, settings["cost_frames"], size, semi_axes=semi_axes)
        area = statistics.mean(d.instance.mask_crop.sum() for d in sequence[0].detections) / (
            size[0] * size[1]
        )
        timings = {}
        for make in makers:
            tracker = make(size)
            wall, cpu = [], []
            for frame in sequence:
                start, start_cpu = time.perf_counter(), time.process_time()
                tracker(frame)
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            skip = len(sequence) // 10  # the first frames give births only
            timings[tracker.name] = (sorted(wall[skip:]), sorted(cpu[skip:]))
        ours = statistics.median(timings[Ours.name][0])
        for name, (wall, cpu) in timings.items():
            median = statistics.median(wall)
            rows.append(
                [
                    f"{count} instances (mean mask {area:.2%} of the frame)",
                    name,
                    report.ms(median),
                    report.ms(wall[int(0.9 * (len(wall) - 1))]),
                    report.ms(statistics.median(cpu)),
                    f"{median / ours:.2f}",
                ]
            )
    report.title("tracking: cost per frame at 1920x1080 (the tracker's update only)")
    print(
        f"{settings['cost_frames']} frames per row (the first tenth, births only, left out); "
        "objects moving and bouncing inside the view, 3 prompts, box and mask jitter; wall time, and the "
        "process's CPU time (less moved by other work on these cores)"
    )
    report.table(["frame", "tracker", "median ms", "p90 ms", "median CPU ms", "x ours"], rows)


def main(quick: bool) -> None:
    settings = QUICK if quick else FULL
    for miss_rate in (0.1,) if quick else (0.1, 0.2):
        quality_table(settings, miss_rate, 0.05)
    cost_table(settings)
    from . import video_tracker_cost

    video_tracker_cost.main(quick)
