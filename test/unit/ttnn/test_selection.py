"""On-device selection (ttnn_model/selection.py) through the emulator against torch: the same kept
rows and scores as torch.topk, the threshold flags, and mask logits of only the kept rows equal to
the full product's rows, at SAM 3's sizes (200 queries + presence in 224 rows, 288 x 288 maps)."""

from __future__ import annotations

import pytest
import torch

QUERIES, ROWS = 200, 224


@pytest.fixture
def chip(ttnn):
    from tt_sam3_ros.engines.ttnn_model.config import device_settings

    device = ttnn.open_device(device_id=0)
    return ttnn, device, device_settings(ttnn, device)


def _tensor(ttnn, device, values: torch.Tensor):
    return ttnn.from_torch(
        values,
        dtype=ttnn.bfloat16,
        layout=ttnn.TILE_LAYOUT,
        device=device,
        memory_config=ttnn.DRAM_MEMORY_CONFIG,
    )


def distinct_scores(batch: int, seed: int = 0) -> torch.Tensor:
    """(batch, ROWS, 1) scores in (0, 1), distinct bfloat16 values within each prompt (ties would
    leave the order of equal scores open); the presence and padding rows score 1.0, above every
    query, so a selection that forgets to exclude them shows it."""
    generator = torch.Generator().manual_seed(seed)
    pool = torch.unique(torch.linspace(0.01, 0.99, 4000).to(torch.bfloat16).float())
    scores = torch.ones(batch, ROWS, 1)
    for b in range(batch):
        scores[b, 1 : 1 + QUERIES, 0] = pool[torch.randperm(len(pool), generator=generator)[:QUERIES]]
    return scores


def select(chip, scores: torch.Tensor, k: int, threshold: float, candidates: torch.Tensor | None = None):
    from tt_sam3_ros.engines.ttnn_model import selection

    ttnn, device, settings = chip
    if candidates is None:
        candidates = selection.candidate_row(ROWS, 1, QUERIES)
    values, indices, kept = selection.top_queries(
        ttnn, _tensor(ttnn, device, scores), _tensor(ttnn, device, candidates), k, threshold, settings
    )
    return values, indices, kept


@pytest.mark.parametrize("k", [1, 50, 200])
def test_top_queries_are_torch_topk_of_the_query_rows(chip, k):
    ttnn = chip[0]
    scores, threshold = distinct_scores(batch=2), 0.5
    values, indices, kept = select(chip, scores, k, threshold)
    want_values, want_rows = torch.topk(scores[:, 1 : 1 + QUERIES, 0], k, dim=-1)
    got_rows = ttnn.to_torch(indices).long().reshape(2, k)
    assert indices.dtype == ttnn.uint16
    assert torch.equal(got_rows, want_rows + 1)  # decoder rows: query number + 1
    assert torch.equal(ttnn.to_torch(values).float().reshape(2, k), want_values)
    assert torch.equal(ttnn.to_torch(kept).float().reshape(2, k), (want_values > threshold).float())


def test_presence_and_padding_rows_are_never_kept(chip):
    """They score highest here; without the candidate row top-k takes them first."""
    ttnn = chip[0]
    scores = distinct_scores(batch=1)
    _, indices, _ = select(chip, scores, 50, 0.5)
    rows = set(ttnn.to_torch(indices).long().flatten().tolist())
    assert rows <= set(range(1, 1 + QUERIES))
    _, unmasked, _ = select(chip, scores, 50, 0.5, candidates=torch.zeros(1, 1, ROWS))
    assert {0, ROWS - 1} <= set(ttnn.to_torch(unmasked).long().flatten().tolist())


def test_mask_logits_of_the_kept_rows_are_the_full_products_rows(chip):
    """Two prompts at full size: the kept queries gathered on the device, then the mask embedder and
    the mask-logit product on k = 50 rows, against the product over all 224 rows."""
    from transformers import Sam3Config
    from transformers.models.sam3.modeling_sam3 import Sam3MaskDecoder

    from tt_sam3_ros.engines.ttnn_model import selection
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_segmentation_head
    from tt_sam3_ros.engines.ttnn_model.segmentation_head import mask_embeddings, mask_logits
    from tt_sam3_ros.engines.ttnn_model.weights import upload

    ttnn, device, settings = chip
    head = Sam3MaskDecoder(Sam3Config().mask_decoder_config).eval()
    w = upload(ttnn, device, prepare_segmentation_head(head), ttnn.bfloat8_b, ttnn.bfloat16)
    generator = torch.Generator().manual_seed(3)
    queries = _tensor(ttnn, device, torch.randn(2, ROWS, 256, generator=generator))
    pixels = _tensor(ttnn, device, torch.randn(2, 288 * 288, 256, generator=generator))
    k = 50
    _, indices, _ = select(chip, distinct_scores(batch=2, seed=1), k, 0.5)
    one_hot = selection.selection_matrix(
        ttnn, indices, _tensor(ttnn, device, selection.row_index(ROWS)), settings
    )
    kept_queries = selection.gather_rows(ttnn, one_hot, queries, settings)
    assert torch.equal(
        ttnn.to_torch(kept_queries).float(),
        ttnn.to_torch(queries).float()[torch.arange(2)[:, None], ttnn.to_torch(indices).long().reshape(2, k)],
    )
    kept = ttnn.to_torch(
        mask_logits(ttnn, mask_embeddings(ttnn, kept_queries, w, settings), pixels, w, settings)
    )
    full = ttnn.to_torch(mask_logits(ttnn, mask_embeddings(ttnn, queries, w, settings), pixels, w, settings))
    rows = ttnn.to_torch(indices).long().reshape(2, k)
    want = full.float()[torch.arange(2)[:, None], rows]
    assert kept.shape == (2, k, 288 * 288)
    error = float((kept.float() - want).abs().max())
    print(f"kept-row mask logits vs the full product's rows: max |difference| {error:.3g}")
    assert torch.equal(kept.float(), want)


def test_kept_count_is_max_instances_capped_at_the_queries():
    from tt_sam3_ros.engines.ttnn_model.selection import kept_count

    assert kept_count(50, 200) == 50
    assert kept_count(50, 20) == 20
    with pytest.raises(ValueError):
        kept_count(0, 200)


def test_logits_below_minus_two_still_rank_above_the_padding_rows(chip):
    """The engine ranks query logits, which go well below -2 (the old NOT_A_QUERY, enough for
    scores in [0, 1]): padding rows must still sort under every query."""
    ttnn = chip[0]
    pool = torch.unique(torch.linspace(-30.0, -2.5, 4000).to(torch.bfloat16).float())  # distinct
    logits = torch.full((1, ROWS, 1), 0.0)  # presence and padding rows at logit 0
    logits[0, 1 : 1 + QUERIES, 0] = pool[
        torch.randperm(len(pool), generator=torch.Generator().manual_seed(1))[:QUERIES]
    ]
    _, indices, _ = select(chip, logits, 50, 0.0)
    want_rows = torch.topk(logits[:, 1 : 1 + QUERIES, 0], 50, dim=-1).indices + 1
    assert torch.equal(ttnn.to_torch(indices).long().reshape(1, 50), want_rows)
