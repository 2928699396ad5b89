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
import logging
import sys
from typing import TYPE_CHECKING

from tt_sam3_ros.weights import WeightsError
from tt_sam3_ros.weights.tiny_model import TINY_MODEL_ID

if TYPE_CHECKING:
    pass

from tt_sam3_ros.cli.options import _USER_ERRORS, _model_arguments, _ttnn_options
from tt_sam3_ros.cli.segment import _segment_parser, parse_box
from tt_sam3_ros.cli.track import _track_parser

__all__ = ["_model_arguments", "_ttnn_options", "main", "parse_box"]

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
