"""`tt-sam3 segment`: one image (or several) to an overlay PNG and a JSON of the results."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tt_sam3_ros.core.errors import InputError, quoted
from tt_sam3_ros.core.exemplars import Exemplar
from tt_sam3_ros.weights.tiny_model import TINY_MODEL_ID

if TYPE_CHECKING:
    import numpy as np


from tt_sam3_ros.cli.options import _RANDOM_WARNING, _model_arguments, _segmentation_arguments, open_segmenter


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

    prompts, rgb = _checked_inputs(args)
    boxes = _checked_boxes(args, prompts, rgb.shape[:2])
    if args.model == TINY_MODEL_ID:
        print(_RANDOM_WARNING, file=sys.stderr)
    box_only = any(not b.prompt for b in boxes)
    # the box-only concept is one prompt more
    with open_segmenter(args, len(prompts) + box_only) as segmenter:
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
