"""What `tt-sam3 segment` and `tt-sam3 track` share: the model and engine arguments, the
segmentation settings, and the errors whose message is written for the user."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.engines import TTNN_DTYPE_NAMES, TTNN_PROMPT_PATHS
from tt_sam3_ros.engines.base import EngineError
from tt_sam3_ros.weights import WeightsError
from tt_sam3_ros.weights.tiny_model import TINY_MODEL_ID

if TYPE_CHECKING:
    pass


#: The errors whose message is written for the user (what is wrong, what to do): printed as one
#: line. Exit status 1 for weights that cannot be had, 2 for a bad argument or an unusable engine.
_USER_ERRORS = (InputError, EngineError, WeightsError)

LOG = logging.getLogger("tt_sam3")

_RANDOM_WARNING = (
    "\n"
    "  ************************************************************************\n"
    "  *  tiny-random: a RANDOM SAM 3 for trying the plumbing. Its masks,     *\n"
    "  *  boxes and scores are MEANINGLESS. Use real weights for real output. *\n"
    "  ************************************************************************\n"
)


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


def open_segmenter(args: argparse.Namespace, max_prompts: int) -> Any:
    """The segmenter the model and engine arguments ask for, sized for ``max_prompts`` prompts
    (the chip prompt path compiles only the buckets these need) and ``--max-instances`` (the
    queries it keeps on the chip)."""
    from tt_sam3_ros.core.segmenter import Sam3Segmenter

    return Sam3Segmenter.from_pretrained(
        model_id=args.model,
        revision=args.revision,
        weights_dir=args.weights_dir,
        engine=args.engine,
        device=args.device,
        dtype=args.dtype,
        ttnn_options=_ttnn_options(args),
        max_prompts=max_prompts,
        max_instances=args.max_instances,
    )
