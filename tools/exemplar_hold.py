"""How well exemplar boxes hold when carried to later frames, on your own video and weights.

    PYTHONPATH=$PWD .venv/bin/python tools/exemplar_hold.py drive.mp4 --prompt bolt \
        --box 0:100,120,180,200 --negative-box 0:400,50,460,110 --box 40:90,130,170,210

SAM 3 defines exemplars per image; the node carries the encoded boxes of the frame they were
drawn on to later frames (our extension). The first frame with boxes is where they are drawn;
every later frame with boxes of its own (draw the same kind of object there) is a check: its
answer with the carried boxes is compared with SAM 3's own answer given the boxes drawn on that
frame. Per check frame it prints the instances of each side and how many match at mask IoU
>= 0.5, with their mean IoU; every frame's instance count is printed too.

--box / --negative-box: FRAME:[PROMPT=]x1,y1,x2,y2 in pixels (as `tt-sam3 segment`, with the
frame index first). Weights: --model / --weights-dir as for `tt-sam3` (tiny-random for a dry run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from tt_sam3_ros.cli.main import parse_box
from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.exemplars import Exemplar
from tt_sam3_ros.core.results import SegmentationResult
from tt_sam3_ros.core.segmenter import Sam3Segmenter
from tt_sam3_ros.core.video import frames

MATCH_IOU = 0.5


def boxes_by_frame(args: argparse.Namespace) -> dict[int, list[Exemplar]]:
    """--box and --negative-box grouped by their frame index."""
    by_frame: dict[int, list[Exemplar]] = {}
    for texts, positive in ((args.box, True), (args.negative_box, False)):
        for text in texts:
            frame, sign, box = text.partition(":")
            if not sign or not frame.isdigit():
                raise InputError(f"box {text!r} must start with its frame index, e.g. 0:10,20,110,90")
            by_frame.setdefault(int(frame), []).append(parse_box(box, positive, args.prompt))
    if not by_frame:
        raise InputError("give the boxes to carry: --box FRAME:x1,y1,x2,y2")
    return by_frame


def matches(carried: SegmentationResult, drawn: SegmentationResult) -> tuple[int, float]:
    """Greedy one-to-one matches of same-prompt instances at mask IoU >= MATCH_IOU: (count, mean IoU)."""
    ious = []
    taken: set[int] = set()
    for ours in carried.instances:
        best, best_iou = None, MATCH_IOU
        for index, theirs in enumerate(drawn.instances):
            if index in taken or theirs.prompt != ours.prompt:
                continue
            union = np.logical_or(ours.mask, theirs.mask).sum()
            iou = np.logical_and(ours.mask, theirs.mask).sum() / union if union else 0.0
            if iou >= best_iou:
                best, best_iou = index, iou
        if best is not None:
            taken.add(best)
            ious.append(best_iou)
    return len(ious), float(np.mean(ious)) if ious else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="exemplar_hold.py", description=__doc__.splitlines()[0])
    parser.add_argument("video", type=Path)
    parser.add_argument("--prompt", "-p", action="append", default=[])
    parser.add_argument("--box", action="append", default=[])
    parser.add_argument("--negative-box", action="append", default=[])
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--frames", type=int, default=0, help="stop after this many frames (0: all)")
    parser.add_argument("--model", default="facebook/sam3")
    parser.add_argument("--weights-dir", default=None)
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    try:
        plan = boxes_by_frame(args)
    except InputError as error:
        print(f"exemplar_hold: {error}", file=sys.stderr)
        return 2
    first = min(plan)
    settings = {"threshold": args.threshold, "max_instances": 255}
    with Sam3Segmenter.from_pretrained(
        model_id=args.model, weights_dir=args.weights_dir, engine=args.engine, device=args.device
    ) as segmenter:
        carried: dict = {}
        for index, rgb in frames(args.video):
            if args.frames and index >= args.frames:
                break
            if index < first:
                continue
            if index == first:
                result = segmenter(rgb, args.prompt, boxes=plan[index], **settings)
                carried = result.exemplars
                print(f"frame {index}: boxes drawn, {len(result.instances)} instances")
                continue
            result = segmenter(rgb, args.prompt, carried=carried, **settings)
            line = f"frame {index}: {len(result.instances)} instances with the carried boxes"
            if index in plan:
                drawn = segmenter(rgb, args.prompt, boxes=plan[index], **settings)
                count, mean_iou = matches(result, drawn)
                line += (
                    f"; with boxes drawn here {len(drawn.instances)}; matched {count} "
                    f"(mask IoU >= {MATCH_IOU}, mean {mean_iou:.3f})"
                )
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
