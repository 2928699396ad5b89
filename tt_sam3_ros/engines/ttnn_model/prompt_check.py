"""The warm-up check that decides ``prompt_path="auto"``: the chip prompt path against the host's.

On a chip nobody has run this engine on, the chip prompt path may compute wrong numbers without
any error (a kernel that mis-computes, an unpack format that is off) or fail outright. With
``auto``, warm-up runs one frame through both prompt paths on the same image features (the image
trace's outputs: the chip path reads them on the chip, the host path reads them back) and keeps
the chip path only when the mask logits of the host path's best queries agree at PCC >= GATE;
otherwise, or when the chip path raises, the engine serves the host prompt path and says why.

The check frame is a seeded random texture, not the flat grey frame warm-up compiles on: on a
flat frame every position looks alike and a wrong stage could still correlate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

LOG = logging.getLogger(__name__)

#: The agreement the chip prompt path must reach: PCC of the mask logits against the host's.
GATE = 0.99
#: The prompt and how many of the host path's best queries are compared.
PROMPT = "object"
QUERIES = 4
#: How long a quoted error may be in the reason.
MAX_ERROR_CHARS = 200


@dataclass(frozen=True)
class PromptPathCheck:
    """The check's verdict: passed, the PCC when it got that far, and the reason in words."""

    passed: bool
    pcc: float | None
    reason: str


def check_frame(side: int) -> np.ndarray:
    """The seeded random uint8 (side, side, 3) frame the check runs on."""
    return np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)


def pcc(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two arrays (NaN when either is constant or not finite)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()) or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def compare(
    image_outputs: list[Any], read_back: Any, chip: Any, host: Any, gate: float = GATE
) -> PromptPathCheck:
    """Both prompt paths on the same image: `image_outputs` the image trace's device outputs,
    `read_back` the same maps read back for the host (transformers' vision output)."""
    prompts = host.encode_prompts([PROMPT])
    expected = host.decode(host.image_features(read_back), prompts)
    best = np.argsort(-expected.logits[0])[:QUERIES]
    prompt_index = np.zeros(len(best), dtype=np.int64)
    expected_masks = host.fetch_masks(expected, prompt_index, best)
    try:
        got = chip.decode(chip.image_features(image_outputs), prompts)
        got_masks = chip.fetch_masks(got, prompt_index, best)
    except Exception as error:  # any failure of the chip path means: serve the host's
        text = " ".join(str(error).split())[:MAX_ERROR_CHARS]
        return PromptPathCheck(False, None, f"the chip prompt path raised {type(error).__name__}: {text!r}")
    value = pcc(expected_masks, got_masks)
    if value >= gate:
        return PromptPathCheck(True, value, f"mask logits PCC {value:.4f} >= {gate} against the host path")
    return PromptPathCheck(False, value, f"mask logits PCC {value:.4f} < {gate} against the host path")
