"""The tiny model answers differently for different images, as a trained SAM 3 does.

Every test that compares two implementations on the tiny model (torch against ttnn, features of
one image against another, a node against the library) can only see what the model's outputs
depend on; these tests hold that to figures. The figures come from
test/support/image_sensitivity.py, which prints them when run as a script.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from image_sensitivity import measure

#: The property the suite stands on (frames.distinct_frames(), prompts "car" and "person").
#: The issue asked for 0.2; the model gives 0.32 and 0.36, and the chip gates' score tolerance
#: (0.03) is a tenth of this bound, so that another frame's scores cannot pass them.
MIN_SCORE_SPREAD = 0.3
MIN_PRESENCE_SPREAD = 0.2
MAX_LOGITS_PCC = 0.9
#: Boxes move by at least this much (mean over coordinates, pixels of the 1008-pixel input).
MIN_BOX_SHIFT_PX = 10.0
#: At least this fraction of mask pixels flips between any two frames.
MIN_MASK_CHANGE = 0.1


@pytest.fixture(scope="module")
def sensitivity(tiny_model, tokenizer):
    return measure(tiny_model, tokenizer)


def test_scores_and_presence_spread_across_frames(sensitivity) -> None:
    assert min(sensitivity.score_spread) >= MIN_SCORE_SPREAD, sensitivity
    assert min(sensitivity.presence_spread) >= MIN_PRESENCE_SPREAD, sensitivity


def test_logits_of_different_frames_do_not_correlate(sensitivity) -> None:
    assert sensitivity.max_logits_pcc <= MAX_LOGITS_PCC, sensitivity


def test_boxes_and_masks_move_with_the_frame(sensitivity) -> None:
    assert sensitivity.min_box_shift_px >= MIN_BOX_SHIFT_PX, sensitivity
    assert sensitivity.min_mask_change >= MIN_MASK_CHANGE, sensitivity


def test_the_measure_sees_a_blind_model(tokenizer) -> None:
    """Negative control: the same architecture at transformers' own initialisation (0.02) fails
    every bound above; its scores hardly move and its logits correlate across frames."""
    from transformers import Sam3Model

    from tt_sam3_ros.weights.tiny_model import tiny_sam3_config

    with torch.random.fork_rng():
        torch.manual_seed(0)
        blind_model = Sam3Model(tiny_sam3_config()).eval()
    blind = measure(blind_model, tokenizer)
    assert max(blind.score_spread) < MIN_SCORE_SPREAD
    assert blind.max_logits_pcc > MAX_LOGITS_PCC


def test_it_stays_tiny_and_seeded(tiny_model) -> None:
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3

    assert sum(p.numel() for p in tiny_model.parameters()) < 2_000_000
    again, other = build_tiny_sam3(seed=0).state_dict(), build_tiny_sam3(seed=1).state_dict()
    for name, weight in tiny_model.state_dict().items():
        assert torch.equal(weight, again[name]), name
    query = "detr_decoder.query_embed.weight"
    assert not np.allclose(tiny_model.state_dict()[query], other[query])
