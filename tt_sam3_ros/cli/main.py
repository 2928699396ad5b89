"""`tt-sam3`: SAM 3 from the shell, no ROS needed.

    tt-sam3 segment IMAGE --prompt car --prompt person [--out DIR] [--threshold T]
    tt-sam3 segment IMAGE --prompt bolt --box x1,y1,x2,y2 --negative-box x1,y1,x2,y2
    tt-sam3 track VIDEO --prompt car [--out DIR] [--max-age-s S] [--max-age-frames N] [--min-iou F]
        [--tracker sam3]
    tt-sam3 publish-images DIR_OR_VIDEO --topic image --rate 5

`segment` writes DIR/<image>_overlay.png (masks, boxes, labels, scores) and
DIR/<image>.json (the results; ids match the overlay's labels). `track` writes
DIR/<video>_tracked.mp4 (each track id its own colour and label in every frame) and
DIR/<video>.jsonl (one line per frame: its instances with their mask ids and track ids).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tt_sam3_ros.core.errors import InputError, quoted
from tt_sam3_ros.core.exemplars import Exemplar
from tt_sam3_ros.engines import TTNN_DTYPE_NAMES, TTNN_PROMPT_PATHS
from tt_sam3_ros.engines.base import EngineError
from tt_sam3_ros.weights import WeightsError
from tt_sam3_ros.weights.tiny_model import TINY_MODEL_ID

if TYPE_CHECKING:
    import numpy as np

    from tt_sam3_ros.core.video import TrackWriter, VideoInfo

#: The errors whose message is written for the user (what is wrong, what to do): printed as one
#: line. Exit status 1 for weights that cannot be had, 2 for a bad argument or an unusable engine.
_USER_ERRORS = (InputError, EngineError, WeightsError)

LOG = logging.getLogger("tt_sam3")

#: Shown under `tt-sam3 --help`: what to type first, and why the default weights may be refused.
_EXAMPLES = f"""\
examples:
  tt-sam3 segment street.png --prompt car --prompt person --out results
  tt-sam3 track drive.mp4 --prompt car --out results
  tt-sam3 publish-images pictures/ --topic image --rate 5
  tt-sam3 segment street.png --prompt car --model {TINY_MODEL_ID}   (plumbing only: random weights)
  In a ROS 2 workspace the command is `ros2 run tt_sam3_ros tt-sam3 ...`.

weights:
  The default model facebook/sam3 is gated on the Hugging Face hub (SAM License): accept the
  licence at https://huggingface.co/facebook/sam3, then run `hf auth login` (or set HF_TOKEN).
  A local copy needs no login: --model /path/to/sam3 (a folder in the transformers format, or
  Meta's sam3.pt). --model {TINY_MODEL_ID} needs no weights at all.
"""

_RANDOM_WARNING = (
    "\n"
    "  ************************************************************************\n"
    "  *  tiny-random: a RANDOM SAM 3 for trying the plumbing. Its masks,     *\n"
    "  *  boxes and scores are MEANINGLESS. Use real weights for real output. *\n"
    "  ************************************************************************\n"
)


def _segment_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("segment", help="segment one image and write an overlay PNG and a JSON")
    parser.add_argument("image", type=Path, help="PNG or JPEG file")
    _segmentation_arguments(parser, "to keep", prompt_required=False)
    box_help = (
        "exemplar box in the image's pixels, [PROMPT=]x1,y1,x2,y2; repeat for more. Without PROMPT= it "
        "refines the only --prompt, or, with no --prompt (or an empty PROMPT=), joins the box-only concept"
    )
    parser.add_argument("--box", action="append", default=[], metavar="[PROMPT=]X1,Y1,X2,Y2", help=box_help)
    parser.add_argument(
        "--negative-box",
        action="append",
        default=[],
        metavar="[PROMPT=]X1,Y1,X2,Y2",
        help="like --box, marking what the concept is not",
    )
    _model_arguments(parser)
    parser.set_defaults(run=_run_segment)


def _segmentation_arguments(
    parser: argparse.ArgumentParser, instances_per: str, prompt_required: bool = True
) -> None:
    """Prompts, output folder and the selection settings (segment and track share them)."""
    from tt_sam3_ros.core.segmenter import DEFAULT_MAX_INSTANCES, DEFAULT_THRESHOLD

    parser.add_argument(
        "--prompt",
        "-p",
        action="append",
        required=prompt_required,
        default=[],
        help="text prompt; repeat for more",
    )
    parser.add_argument("--out", type=Path, default=Path("."), help="output folder (default: current)")
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"score threshold in [0, 1] (default {DEFAULT_THRESHOLD})",
    )
    parser.add_argument(
        "--max-instances",
        type=int,
        default=DEFAULT_MAX_INSTANCES,
        help=f"most instances {instances_per} (default {DEFAULT_MAX_INSTANCES})",
    )


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose the model and where it runs (segment and track share them)."""
    parser.add_argument(
        "--model",
        default="facebook/sam3",
        help=f"hub id, a local folder or file (transformers format or Meta's sam3.pt), "
        f"or '{TINY_MODEL_ID}' (meaningless output, no weights)",
    )
    parser.add_argument("--revision", default=None, help="hub revision (default: the pinned one)")
    parser.add_argument(
        "--weights-dir", default=None, help="local folder (transformers format or Meta sam3.pt)"
    )
    parser.add_argument("--engine", default="auto", choices=["auto", "torch", "ttnn"])
    parser.add_argument(
        "--device",
        default=None,
        help="cpu, cuda, cuda:N (torch) or a chip id 0, 1, ... (ttnn; with --engine auto, a chip id "
        "picks ttnn)",
    )
    parser.add_argument(
        "--dtype", default=None, help="float32 or bfloat16 (default: bf16 on CUDA, fp32 on CPU)"
    )
    parser.add_argument(
        "--ttnn-weight-cache",
        default=None,
        help="ttnn engine: folder for converted weights (restarts skip it)",
    )
    parser.add_argument(
        "--ttnn-weight-dtype", default=None, choices=TTNN_DTYPE_NAMES, help="ttnn engine: matmul weights"
    )
    parser.add_argument(
        "--ttnn-param-dtype", default=None, choices=TTNN_DTYPE_NAMES, help="ttnn engine: norms and biases"
    )
    parser.add_argument(
        "--ttnn-prompt-path",
        default=None,
        choices=TTNN_PROMPT_PATHS,
        help="ttnn engine: run the prompt path on the chip when its warm-up check against the host's "
        "passes (auto, the default), on the host, or on the chip",
    )


def _ttnn_options(args: argparse.Namespace) -> dict[str, object]:
    """The ttnn engine's options from the command line (None: the engine's default)."""
    return {
        "weight_cache": args.ttnn_weight_cache,
        "weight_dtype": args.ttnn_weight_dtype,
        "param_dtype": args.ttnn_param_dtype,
        "prompt_path": args.ttnn_prompt_path,
    }


def parse_box(text: str, positive: bool, prompts: list[str]) -> Exemplar:
    """One --box / --negative-box argument, [PROMPT=]x1,y1,x2,y2, as an Exemplar.

    Without ``PROMPT=`` the box refines the only prompt, or is box-only when there is none; an
    empty ``PROMPT`` (``=x1,y1,x2,y2``) is box-only whatever the prompts.

    Raises:
        InputError: not four numbers, or no prompt named where several were given.
    """
    named, sign, coordinates = text.rpartition("=")
    if not sign and len(prompts) > 1:
        raise InputError(
            f"box {quoted(text)} does not say which prompt it refines: write PROMPT=x1,y1,x2,y2, "
            "or =x1,y1,x2,y2 for the box-only concept"
        )
    prompt = named.strip() if sign else (prompts[0] if prompts else None)
    try:
        x1, y1, x2, y2 = (float(v) for v in coordinates.split(","))
    except ValueError:
        raise InputError(f"box {quoted(text)} must be x1,y1,x2,y2 in pixels, e.g. 10,20,110,90") from None
    return Exemplar((x1, y1, x2, y2), positive=positive, prompt=prompt or None)


def _checked_boxes(
    args: argparse.Namespace, prompts: list[str], image_size: tuple[int, int]
) -> list[Exemplar]:
    """--box and --negative-box as Exemplars, checked against the image before the model load
    (positives first)."""
    from tt_sam3_ros.core.exemplars import check_exemplars, clip_to_image

    boxes = [parse_box(b, True, prompts) for b in args.box]
    boxes += [parse_box(b, False, prompts) for b in args.negative_box]
    return clip_to_image(check_exemplars(boxes, prompts), image_size)


def _checked_inputs(args: argparse.Namespace) -> tuple[list[str], np.ndarray]:
    """The prompts and the image, checked before the (slow) model load.

    Raises:
        InputError: a prompt, a setting or the image cannot be used; the message says which.
    """
    from tt_sam3_ros.core.preprocess import load_image
    from tt_sam3_ros.core.prompts import validate_prompts
    from tt_sam3_ros.core.segmenter import check_settings

    # segment may go without --prompt (box-only): an empty list is then checked with the boxes.
    boxes_given = getattr(args, "box", None) or getattr(args, "negative_box", None)
    if not args.prompt and not boxes_given:
        raise InputError("give at least one --prompt or --box")
    prompts = validate_prompts(args.prompt) if args.prompt else []
    check_settings(args.threshold, args.max_instances)
    try:
        return prompts, load_image(args.image)
    except OSError as error:  # unreadable or missing file: its name and the reason
        raise InputError(f"cannot read {args.image}: {error.strerror or error}") from None


def _run_segment(args: argparse.Namespace) -> int:
    import cv2

    from tt_sam3_ros.core.overlay import draw_overlay
    from tt_sam3_ros.core.segmenter import Sam3Segmenter

    prompts, rgb = _checked_inputs(args)
    boxes = _checked_boxes(args, prompts, rgb.shape[:2])
    if args.model == TINY_MODEL_ID:
        print(_RANDOM_WARNING, file=sys.stderr)
    box_only = any(not b.prompt for b in boxes)
    with Sam3Segmenter.from_pretrained(
        model_id=args.model,
        revision=args.revision,
        weights_dir=args.weights_dir,
        engine=args.engine,
        device=args.device,
        dtype=args.dtype,
        ttnn_options=_ttnn_options(args),
        # the chip prompt path compiles only the buckets these need (the box-only concept is one)
        max_prompts=len(prompts) + box_only,
        max_instances=args.max_instances,  # and keeps on the chip the queries this run asks for
    ) as segmenter:
        settings = {"threshold": args.threshold, "max_instances": args.max_instances}
        result = segmenter(rgb, prompts, boxes=boxes, **settings)
        details = segmenter.describe()
    report = {"image": str(args.image), **result.to_dict(), "engine": details}
    if args.model == TINY_MODEL_ID:
        report["warning"] = "tiny-random model: random weights, meaningless output"
    overlay = cv2.cvtColor(draw_overlay(rgb, result), cv2.COLOR_RGB2BGR)
    overlay_path = args.out / f"{args.image.stem}_overlay.png"
    json_path = args.out / f"{args.image.stem}.json"
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        if not cv2.imwrite(str(overlay_path), overlay):
            raise OSError(f"OpenCV could not write {overlay_path}")
        json_path.write_text(json.dumps(report, indent=2))
    except OSError as error:  # --out is a file, read-only, on a full disk...
        raise InputError(f"cannot write the results to {args.out}: {error}") from None
    print(f"{len(result.instances)} instance(s); wrote {overlay_path} and {json_path}")
    return 0


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
    from tt_sam3_ros.core.segmenter import Sam3Segmenter, check_settings
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
        segmenter = Sam3Segmenter.from_pretrained(
            model_id=args.model,
            revision=args.revision,
            weights_dir=args.weights_dir,
            engine=args.engine,
            device=args.device,
            dtype=args.dtype,
            ttnn_options=_ttnn_options(args),
            max_prompts=len(prompts),
            max_instances=args.max_instances,
        )
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
        check_tracker_engine("sam3", args.engine)
        tracker = Sam3VideoTracker.from_pretrained(
            model_id=args.model,
            revision=args.revision,
            weights_dir=args.weights_dir,
            device=args.device or "cpu",
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


def _publish_parser(subparsers: argparse._SubParsersAction) -> None:
    # Listed here for `tt-sam3 --help`; main() hands its arguments, --help included, to
    # publish_images.py, whose parser owns them.
    subparsers.add_parser(
        "publish-images", help="publish a folder of images or a video as sensor_msgs/Image (no camera needed)"
    )


def _run_publish(argv: list[str]) -> int:
    from tt_sam3_ros.ros.publish_images import main as publish_main

    return publish_main(argv) or 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `tt-sam3` console script; returns the exit status."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["publish-images"]:
        return _run_publish(argv[1:])
    parser = argparse.ArgumentParser(
        prog="tt-sam3",
        description=__doc__.splitlines()[0],
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    _segment_parser(subparsers)
    _track_parser(subparsers)
    _publish_parser(subparsers)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except _USER_ERRORS as error:
        print(f"tt-sam3: {error}", file=sys.stderr)
        return 1 if isinstance(error, WeightsError) else 2
    # Anything else (a CUDA out-of-memory, a bug in torch or here) keeps its traceback.


if __name__ == "__main__":
    sys.exit(main())
