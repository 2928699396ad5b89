"""The prompt trace's op log (benchmarks/blackhole/prompt_trace.py) and its cost: op counts per stage pinned.

The prompt trace is the sequence the engine's chip prompt path replays per prompt batch
(ChipPromptPath._forward), logged by the emulator on shape-only (torch meta) tensors, and the mask
read after it. Held here: that sequence is the engine's own (same ops on the same shapes as
_forward on the tiny model), and a shape-only log is the log of a run on real values. Pinned, as
test_trace_cost.py pins the image trace: the ops of each fusion-encoder layer, decoder layer and
the decoder's glue, the scoring, the segmentation head and the mask read (a change that adds ops
fails; one that fuses ops lowers the pin in the same commit), and that batching P prompts adds no
op. The logged matrix FLOPs per prompt agree with the independent count for SAM 3 in
docs/design/facts.md (SAM 3).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.blackhole import prompt_trace, trace_cost
from tt_sam3_ros.engines.ttnn_model.config import TILE

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))

#: Ops per fusion-encoder layer: 3 LayerNorms; the self-attention in 6 (one [q | k | v]
#: projection, its position-bias add, the fused head split, SDPA, head concat, output linear);
#: the cross-attention in 15 (3 projections with their head split in 3: transpose, view,
#: transpose; SDPA, head concat, output linear); 2 MLP linears; 3 residual adds. The first
#: layer's self-attention runs once for all prompts: for more than one, it adds their repeat.
OPS_PER_FUSION_LAYER = 29
#: Ops per decoder layer: 3 attentions (query-position add, 15 attention ops, fused add + norm),
#: 2 MLP linears and the fused add + norm.
OPS_PER_DECODER_LAYER = 54
#: The decoder's glue (decoder.decoder_stack): per layer the query position (sine matmul, sin,
#: 2 linears, row mask), the box bias (edge matmul, log1p, reshapes, the 2-layer MLP, the
#: outer sum), the output norm, the box head and the refinement; 2 before the first layer.
OPS_DECODER_GLUE_PER_LAYER = 21
OPS_DECODER_GLUE_FIXED = 2
#: Query logits and presence logits (the detection scores are not made on the chip: the top-k
#: ranks the logits, and the host computes the scores of the kept rows).
OPS_SCORING = 15
#: The prompt cross-attention (norm, 15, add), the pixel decoder (2 stages of upsample, add,
#: conv, GroupNorm, ReLU with their layout changes) and the mask embedder's 3 linears.
OPS_SEGMENTATION_HEAD = 43
#: Issued by ChipPromptPath._forward itself: the class tile placed (matmul, add), the image
#: tokens viewed, the decoder's image keys (add), the pooling weights (softmax, reshape), the
#: presence logit spread to every row (matmul), the float32 boxes split into two bfloat16 halves
#: for the gather (typecast, negate, typecast, add, typecast).
OPS_BETWEEN_MODULES = 12
#: The on-device top-k (permute, candidate add, topk, threshold flags), the one-hot selection
#: (typecast, permute, eq) and 5 gathers (logits, presence, the two box halves, the mask embeddings).
OPS_SELECTION = 12
#: After the replay: the instance projection and the kept rows' mask logits.
OPS_MASK_READ = 2


@pytest.fixture(scope="module")
def tiny_logs():
    return prompt_trace.record("tiny", (1, 2, 16))


@pytest.fixture(scope="module")
def full_log():
    logs, shapes = prompt_trace.record("full", (1,))
    return logs[1], shapes


def pin_stages(ops: list[dict], shapes, prompts: int = 1) -> None:
    stages = Counter(op["stage"] for op in ops)
    per_layer = {
        stage: Counter(op["block"] for op in ops if op["stage"] == stage)
        for stage in ("fusion_encoder", "decoder")
    }
    glue = per_layer["decoder"].pop(None, 0)
    # block numbers run on across the forwards of one recording: count from this one's first
    per_layer = {
        stage: Counter({block - min(counts): n for block, n in counts.items()})
        for stage, counts in per_layer.items()
    }
    assert sorted(per_layer["fusion_encoder"]) == list(range(shapes.encoder_layers))
    assert sorted(per_layer["decoder"]) == list(range(shapes.decoder_layers))
    repeat = 1 if prompts > 1 else 0
    assert per_layer["fusion_encoder"][0] == OPS_PER_FUSION_LAYER + repeat
    assert {per_layer["fusion_encoder"][i] for i in range(1, shapes.encoder_layers)} <= {OPS_PER_FUSION_LAYER}
    assert set(per_layer["decoder"].values()) == {OPS_PER_DECODER_LAYER}
    assert glue == OPS_DECODER_GLUE_FIXED + shapes.decoder_layers * OPS_DECODER_GLUE_PER_LAYER
    assert stages["scoring"] == OPS_SCORING
    assert stages["segmentation_head"] == OPS_SEGMENTATION_HEAD
    assert stages[prompt_trace.BETWEEN_MODULES] == OPS_BETWEEN_MODULES
    assert stages["selection"] == OPS_SELECTION
    assert stages[prompt_trace.MASK_READ] == OPS_MASK_READ
    assert set(stages) == {
        "fusion_encoder",
        "decoder",
        "scoring",
        "segmentation_head",
        "selection",
        prompt_trace.BETWEEN_MODULES,
        prompt_trace.MASK_READ,
    }


def test_op_count_per_stage_is_pinned(tiny_logs, full_log):
    """The tiny model (1 fusion-encoder layer, 2 decoder layers) and SAM 3 (6 and 6)."""
    logs, shapes = tiny_logs
    pin_stages(logs[1], shapes)
    pin_stages(logs[2], shapes, prompts=2)
    pin_stages(*full_log)


def test_batching_prompts_adds_no_op_and_scales_the_shapes(tiny_logs):
    """Every stage issues as many ops for 2 and 16 prompts (the same ops), and for one prompt
    one fewer in the fusion encoder (nothing to repeat its shared self-attention to), on shapes
    that carry the batch, at a cost that grows with it."""
    logs, _ = tiny_logs
    per_stage = {p: Counter(op["stage"] for op in log) for p, log in logs.items()}
    assert per_stage[2] == per_stage[16]
    assert per_stage[1] + Counter({"fusion_encoder": 1}) == per_stage[2]
    assert [op["op"] for op in logs[2]] == [op["op"] for op in logs[16]]
    fusion = [op for op in logs[16] if op["stage"] == "fusion_encoder"]
    batches = [op["inputs"][0]["shape"][0] for op in fusion]
    shared = batches.index(16)  # the first layer's self-attention runs once, then its repeat
    assert set(batches[:shared]) == {1} and set(batches[shared:]) == {16}
    assert fusion[shared - 1]["op"] == "repeat"
    cost = {p: sum(c.seconds for c in trace_cost.price_all(log)) for p, log in logs.items()}
    assert cost[1] < cost[2] < cost[16]


def _calls(ops: list[dict]) -> list[tuple]:
    return [(op["op"], [(t["shape"], t["dtype"], t["layout"]) for t in op["inputs"]]) for op in ops]


def test_the_sequence_is_the_chip_prompt_paths_own(tiny_model, tokenizer):
    """ChipPromptPath._forward of the engine (prompt_path="chip", the tiny model, 2 prompts) issues
    exactly the ops run_sequence logs, on the same shapes, dtypes and layouts."""
    import numpy as np
    import ttnn_emulator
    from ttnn_mock import oplog  # tools/, on the path above

    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    ttnn_emulator.reset()
    recorder = oplog.Recorder(ttnn_emulator)
    try:
        options = {"ttnn_module": recorder, "use_trace": False, "prompt_path": "chip", "max_prompts": 2}
        with TtnnEngine(tiny_model, tokenizer, **options) as engine:
            path = engine.prompt_path
            state = path.image_features(engine._run_image_path(np.zeros((1008, 1008, 3), np.uint8)))
            before = len(recorder.log)
            path._forward(2, path.prompts.features[2], path.prompts.masks[2], *path._inputs(state))
            engine_ops = [record.to_json() for record in recorder.log[before:]]
    finally:
        ttnn_emulator.reset()
    logs, _ = prompt_trace.record("tiny", (2,), meta=False)
    ours = [op for op in logs[2] if op["stage"] != prompt_trace.MASK_READ]
    assert _calls(ours) == _calls(engine_ops)


def test_shape_only_log_is_the_log_of_real_values():
    """The meta-tensor run logs the very ops, shapes, dtypes and stages a run on real values does."""
    meta, _ = prompt_trace.record("tiny", (2,), meta=True)
    real, _ = prompt_trace.record("tiny", (2,), meta=False)
    assert meta[2] == real[2]


def test_full_size_flops_per_prompt_agree_with_the_design_count(full_log):
    """Logged matrix FLOPs (tile-padded) against the per-prompt count in docs/design/facts.md, SAM 3
    (fusion encoder 0.255 TFLOP, decoder 0.02, segmentation head 0.143 with every query's mask logits,
    which the engine makes for the k kept rows per prompt, tile-padded, in the mask read instead)."""
    ops, shapes = full_log
    tflop = Counter()
    for cost in trace_cost.price_all(ops):
        tflop[(cost.stage, cost.block is None)] += cost.flops / 1e12
    fusion = tflop[("fusion_encoder", False)]
    layers, glue = tflop[("decoder", False)], tflop[("decoder", True)]
    head = tflop[("segmentation_head", True)] + tflop[(prompt_trace.MASK_READ, True)]
    pixels = shapes.mask_side**2
    every_row = 2 * shapes.rows * shapes.hidden * pixels / 1e12
    kept_rows = 2 * -(-prompt_trace.kept(shapes) // TILE) * TILE * shapes.hidden * pixels / 1e12
    print(
        f"full-size prompt trace, TFLOP per prompt: fusion encoder {fusion:.3f}, decoder layers {layers:.3f} "
        f"+ glue {glue:.3f}, segmentation head with the mask read {head:.3f}"
    )
    assert fusion == pytest.approx(0.255, rel=0.05)
    assert layers == pytest.approx(0.02, rel=0.1)
    assert head - kept_rows + every_row == pytest.approx(0.143, rel=0.05)
