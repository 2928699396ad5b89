"""Score both tracking modes on your own annotated clip: IDF1, MOTA and ID switches against ground truth.

    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.tracking.score_clip MOT17-04/img1 \\
        --gt MOT17-04/gt/gt.txt --prompt person --class 1 --out scores
    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.tracking.score_clip street.mp4 \\
        --gt street_gt.txt --prompt car

The clip runs through both of the node's tracking modes with the same weights (facebook/sam3 by
default, or --model / --weights-dir, as `tt-sam3 track` takes them): ``association`` (the detector
on every frame, ids by ``InstanceTracker``) and ``sam3`` (``Sam3VideoTracker``, SAM 3's detector and
memory tracker). Each mode's boxes and ids are written in the MOTChallenge format (OUT/association.txt,
OUT/sam3.txt) and scored by py-motmetrics against the ground truth, boxes matched at IoU >= 0.5.

CLIP: a video file, or a folder of pictures played in name order (MOTChallenge's img1/), whose
frame rate comes from --fps or from the seqinfo.ini beside the folder. Ground truth: MOTChallenge
text, one box a line: frame (from 1), id, left, top, width, height (pixels, 1-based), flag, class,
visibility; lines with flag 0 are left out (MOTChallenge marks boxes not to score so), and --class
keeps only the classes named (MOT17: 1 is a walking person). Every output box counts, whatever its
prompt: give the prompts that name what the ground truth annotates.

Needs py-motmetrics (requirements/dev.txt). ``--model tiny-random`` runs the plumbing without
weights (meaningless scores).
"""

from __future__ import annotations

import argparse
import configparser
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
MODES = ("association", "sam3")
#: What py-motmetrics computes for each mode, in the printed order.
METRICS = ("idf1", "mota", "num_switches", "num_false_positives", "num_misses", "num_objects")


@dataclass
class Truth:
    """Ground-truth boxes (x1, y1, x2, y2, 0-based pixels) by frame index (0-based) and id."""

    boxes: dict[int, dict[int, tuple[float, float, float, float]]] = field(default_factory=dict)


def load_truth(path: Path, classes: list[int] | None = None) -> Truth:
    """MOTChallenge ground truth (see the module docstring), flag-0 lines and other classes left out."""
    import motmetrics as mm

    table = mm.io.loadtxt(str(path), fmt="mot16")  # X, Y made 0-based by the loader
    table = table[table["Confidence"] != 0]
    if classes:
        table = table[table["ClassId"].isin(classes)]
    truth = Truth()
    for (frame, gid), row in table.iterrows():
        x, y = float(row["X"]), float(row["Y"])
        box = (x, y, x + float(row["Width"]), y + float(row["Height"]))
        truth.boxes.setdefault(int(frame) - 1, {})[int(gid)] = box
    return truth


def clip_frames(clip: Path) -> Iterator[np.ndarray]:
    """uint8 RGB frames of a video file, or of a folder's pictures in name order."""
    from tt_sam3_ros.core.preprocess import load_image
    from tt_sam3_ros.core.video import frames

    if clip.is_dir():
        for picture in sorted(p for p in clip.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES):
            yield load_image(picture)
    else:
        for _, rgb in frames(clip):
            yield rgb


def frame_rate(clip: Path, fps: float | None) -> float:
    """--fps, else the video's rate, else the frameRate of the seqinfo.ini beside a picture folder."""
    if fps is not None:
        return fps
    if not clip.is_dir():
        from tt_sam3_ros.core.video import probe

        return probe(clip).fps
    seqinfo = clip.parent / "seqinfo.ini"
    if seqinfo.is_file():
        parser = configparser.ConfigParser()
        parser.read(seqinfo)
        if parser.has_option("Sequence", "frameRate"):
            return float(parser.get("Sequence", "frameRate"))
    raise SystemExit(f"{clip}: a folder of pictures needs --fps (no seqinfo.ini with a frameRate beside it)")


#: One mode's tracker: (frame, time in s) -> [(id, (x1, y1, x2, y2))].
Track = Callable[[np.ndarray, float], list[tuple[int, tuple[float, float, float, float]]]]


def association_mode(args: argparse.Namespace) -> Track:
    from tt_sam3_ros.core.segmenter import Sam3Segmenter
    from tt_sam3_ros.core.tracking import InstanceTracker

    segmenter = Sam3Segmenter.from_pretrained(
        model_id=args.model, weights_dir=args.weights_dir, engine="torch", device=args.device
    )
    tracker = InstanceTracker()

    def track(rgb: np.ndarray, time_s: float):
        found = segmenter(rgb, args.prompt, threshold=args.threshold, max_instances=args.max_instances)
        return [(i.track_id, i.box) for i in tracker.update(found, time_s).instances]

    return track


def sam3_mode(args: argparse.Namespace) -> Track:
    from tt_sam3_ros.core.video_tracker import Sam3VideoTracker, keep_best

    tracker = Sam3VideoTracker.from_pretrained(
        model_id=args.model, weights_dir=args.weights_dir, device=args.device or "cpu"
    )

    def track(rgb: np.ndarray, time_s: float):
        found = keep_best(tracker(rgb, args.prompt), args.threshold, args.max_instances)
        return [(i.track_id, i.box) for i in found.instances]

    return track


def score(
    truth: Truth, outputs: list[list[tuple[int, tuple[float, float, float, float]]]]
) -> dict[str, float]:
    """py-motmetrics' figures of one mode's outputs (one list per frame) against the truth."""
    import motmetrics as mm

    from benchmarks.tracking.tracking_bench import distances

    accumulator = mm.MOTAccumulator(auto_id=True)
    for index, found in enumerate(outputs):
        expected = truth.boxes.get(index, {})
        gids = list(expected)
        truth_boxes = np.array([expected[g] for g in gids], float).reshape(-1, 4)
        boxes = np.array([box for _, box in found], float).reshape(-1, 4)
        accumulator.update(gids, [track_id for track_id, _ in found], distances(truth_boxes, boxes))
    summary = mm.metrics.create().compute(accumulator, metrics=list(METRICS), name="clip")
    return {name: float(summary.loc["clip", name]) for name in METRICS}


def write_mot(path: Path, outputs: list[list[tuple[int, tuple[float, float, float, float]]]]) -> None:
    """MOTChallenge result lines: frame (from 1), id, left, top, width, height (1-based), -1 x4."""
    with path.open("w", encoding="utf-8") as out:
        for index, found in enumerate(outputs):
            for track_id, (x1, y1, x2, y2) in found:
                box = f"{x1 + 1:.1f},{y1 + 1:.1f},{x2 - x1:.1f},{y2 - y1:.1f}"
                out.write(f"{index + 1},{track_id},{box},-1,-1,-1,-1\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tracking.score_clip", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("clip", type=Path, help="a video file, or a folder of pictures (MOTChallenge img1/)")
    parser.add_argument("--gt", type=Path, required=True, help="MOTChallenge ground truth (gt.txt)")
    parser.add_argument("--prompt", action="append", required=True, help="text prompt (repeatable)")
    parser.add_argument(
        "--class", dest="classes", type=int, action="append", help="ground-truth class to keep"
    )
    parser.add_argument("--fps", type=float, help="frame rate of a picture folder")
    parser.add_argument("--frames", type=int, help="score the first N frames only")
    parser.add_argument("--mode", choices=MODES, action="append", help="run only this mode (repeatable)")
    parser.add_argument("--model", default="facebook/sam3", help="hub id, or tiny-random (no weights)")
    parser.add_argument("--weights-dir", help="local folder in the transformers format")
    parser.add_argument(
        "--device", default=None, help="torch device (default: cuda if there is one, else cpu)"
    )
    parser.add_argument("--threshold", type=float, default=0.5, help="least score of a kept instance")
    parser.add_argument("--max-instances", type=int, default=100, help="most instances per frame")
    parser.add_argument("--out", type=Path, default=Path("scores"), help="folder for the MOT-format results")
    args = parser.parse_args(argv)
    if not args.clip.exists():
        parser.error(f"{args.clip} does not exist")
    if not args.gt.is_file():
        parser.error(f"{args.gt} is not a file")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    fps = frame_rate(args.clip, args.fps)
    truth = load_truth(args.gt, args.classes)
    args.out.mkdir(parents=True, exist_ok=True)
    makers = {"association": association_mode, "sam3": sam3_mode}
    print(f"{args.clip}: {len(truth.boxes)} annotated frames, prompts {args.prompt}, model {args.model}")
    print("mode | IDF1 | MOTA | ID switches | FP | misses | objects | s per frame")
    for mode in args.mode or MODES:
        track = makers[mode](args)
        outputs, seconds = [], 0.0
        for index, rgb in enumerate(clip_frames(args.clip)):
            if args.frames is not None and index >= args.frames:
                break
            started = time.perf_counter()
            outputs.append(track(rgb, index / fps))
            seconds += time.perf_counter() - started
        write_mot(args.out / f"{mode}.txt", outputs)
        figures = score(truth, outputs)
        print(
            f"{mode} | {figures['idf1']:.3f} | {figures['mota']:.3f} | {int(figures['num_switches'])} | "
            f"{int(figures['num_false_positives'])} | {int(figures['num_misses'])} | "
            f"{int(figures['num_objects'])} | {seconds / max(len(outputs), 1):.2f}",
            flush=True,
        )
    print(f"results in MOTChallenge format: {args.out}/<mode>.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
