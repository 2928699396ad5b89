"""`tt-sam3 track`: a video to a tracked video and one JSON line per frame."""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.weights.tiny_model import TINY_MODEL_ID

if TYPE_CHECKING:
    from tt_sam3_ros.core.video import TrackWriter, VideoInfo

from tt_sam3_ros.cli.options import _RANDOM_WARNING, _model_arguments, _segmentation_arguments, open_segmenter


def _track_parser(subparsers: argparse._SubParsersAction) -> None:
    from tt_sam3_ros.core.tracking import DEFAULT_MAX_AGE_FRAMES, DEFAULT_MAX_AGE_S, DEFAULT_MIN_IOU

    parser = subparsers.add_parser(
        "track", help="segment every frame of a video and track the instances; write an MP4 and JSON lines"
    )
    parser.add_argument("video", type=Path, help="a video file OpenCV can read (MP4, AVI, MKV, ...)")
    _segmentation_arguments(parser, "per frame")
    parser.add_argument(
        "--max-age-s",
        type=float,
        default=DEFAULT_MAX_AGE_S,
        help=f"a track ends once unseen for longer than this (video time) and for --max-age-frames "
        f"frames (default {DEFAULT_MAX_AGE_S})",
    )
    parser.add_argument(
        "--max-age-frames",
        type=int,
        default=DEFAULT_MAX_AGE_FRAMES,
        help=f"a track ends once unseen in this many frames and for --max-age-s "
        f"(default {DEFAULT_MAX_AGE_FRAMES})",
    )
    parser.add_argument(
        "--min-iou",
        type=float,
        default=DEFAULT_MIN_IOU,
        help=f"least mask IoU with a track's predicted mask to continue it (default {DEFAULT_MIN_IOU})",
    )
    parser.add_argument(
        "--tracker",
        default="association",
        choices=["association", "sam3"],
        help="association: detect every frame, ids by mask and motion matching (fast); sam3: SAM 3's "
        "own video tracker, with a memory of past frames per object (the torch engine only)",
    )
    _model_arguments(parser)
    parser.set_defaults(run=_run_track)


def _run_track(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from tt_sam3_ros.core.prompts import validate_prompts
    from tt_sam3_ros.core.segmenter import check_settings
    from tt_sam3_ros.core.tracking import InstanceTracker, check_tracking_settings
    from tt_sam3_ros.core.video import TrackWriter, frames, probe

    # Everything a user can get wrong is checked before the (slow) model load.
    prompts = validate_prompts(args.prompt)
    check_settings(args.threshold, args.max_instances)
    check_tracking_settings(args.max_age_s, args.min_iou, args.max_age_frames)
    info = probe(args.video)
    video_path = args.out / f"{args.video.stem}_tracked.mp4"
    jsonl_path = args.out / f"{args.video.stem}.jsonl"
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        writer = TrackWriter(video_path, jsonl_path, info.fps, info.size)
    except OSError as error:  # --out is a file, read-only, on a full disk...
        raise InputError(f"cannot write the results to {args.out}: {error}") from None
    tiny = args.model == TINY_MODEL_ID
    if tiny:
        print(_RANDOM_WARNING, file=sys.stderr)
    extra = {"warning": "tiny-random model: random weights, meaningless output"} if tiny else {}
    if args.tracker == "sam3":
        return _track_with_sam3(args, prompts, info, writer, extra)
    try:
        segmenter = open_segmenter(args, len(prompts))
    except BaseException:
        writer.discard()  # no model, no frames: leave no empty results behind
        raise
    with writer, segmenter:
        tracker = InstanceTracker(
            max_age_s=args.max_age_s, min_iou=args.min_iou, max_age_frames=args.max_age_frames
        )
        count, ids = 0, set()
        progress = tqdm(frames(args.video), total=info.frame_count or None, unit="frame", desc="tracking")
        # segment_stream reads a frame ahead (frame N+1 goes to the engine while frame N runs);
        # the tee keeps each frame for the writer until its result comes.
        for_engine, for_writer = itertools.tee(progress)
        pictures = (rgb for _, rgb in for_engine)
        settings = {"threshold": args.threshold, "max_instances": args.max_instances}
        results = segmenter.segment_stream(pictures, prompts, **settings)
        for (index, rgb), segmented in zip(for_writer, results, strict=True):
            time_s = index / info.fps
            result = tracker.update(segmented, time_s)
            writer.write(index, time_s, rgb, result, **extra)
            ids.update(i.track_id for i in result.instances)
            count += 1
    print(f"{count} frame(s), {len(ids)} track(s); wrote {video_path} and {jsonl_path}")
    return 0


def _track_with_sam3(
    args: argparse.Namespace, prompts: list[str], info: VideoInfo, writer: TrackWriter, extra: dict
) -> int:
    """`track --tracker sam3`: SAM 3's video tracker over the video, one frame at a time."""
    from tqdm import tqdm

    from tt_sam3_ros.core.video import frames
    from tt_sam3_ros.core.video_tracker import Sam3VideoTracker, check_tracker_engine, keep_best

    try:
        check_tracker_engine("sam3", args.engine, args.device, getattr(args, "dtype", None))
        tracker = Sam3VideoTracker.from_pretrained(
            model_id=args.model,
            revision=args.revision,
            weights_dir=args.weights_dir,
            device=args.device,
        )
    except BaseException:
        writer.discard()
        raise
    with writer:
        count, ids = 0, set()
        for index, rgb in tqdm(
            frames(args.video), total=info.frame_count or None, unit="frame", desc="tracking"
        ):
            result = keep_best(tracker(rgb, prompts), args.threshold, args.max_instances)
            writer.write(index, index / info.fps, rgb, result, **extra)
            ids.update(i.track_id for i in result.instances)
            count += 1
    video_path, jsonl_path = writer.paths
    print(f"{count} frame(s), {len(ids)} track(s) (SAM 3 tracker); wrote {video_path} and {jsonl_path}")
    return 0
