"""The image trace's op count per stage (the geometry encoder's class token included), and the
cost model that prices it (benchmarks/blackhole/trace_cost.py).

The op counts are pinned: the engine's image path runs once on the emulator through the op
recorder the mock check and the benchmark use (tools/ttnn_mock/oplog.py), and every ViT block
must issue exactly the pinned number of device ops. A change that adds ops to a block fails
here; one that fuses ops lowers the pin in the same commit.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from benchmarks.blackhole import trace_cost

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
from ttnn_mock import oplog

#: Device ops per stage of the image path (Tenstorrent's public SAM 3 ViT uses 13 per block).
OPS_PER_WINDOWED_BLOCK = 15
OPS_PER_GLOBAL_BLOCK = 15
#: The patch embedding (9 ops) and the four RoPE tables copied to L1 for the blocks (vit.rope_in_l1).
OPS_PATCH_EMBED = 13
OPS_NECK = 34
#: The geometry encoder's class token (3 layers at full size, 1 in the tiny model), per layer:
#: LayerNorm, v and o linears, add (the one-key self-attention); LayerNorm, 15 ops of cross-
#: attention (3 projections with their head split in 3: transpose, view, transpose; SDPA, head
#: concat, output linear), add; LayerNorm, 2 MLP linears, add. Around the layers: the map's
#: reshape (a view), the keys' add of the position encoding, the output LayerNorm.
OPS_GEOMETRY_PER_LAYER = 25
OPS_GEOMETRY_OUTSIDE_LAYERS = 3


@pytest.fixture(scope="module")
def recorded_forward(tiny_model, tokenizer):
    """The op log of one eager image-path forward of the tiny model on the emulator."""
    import ttnn_emulator

    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    ttnn_emulator.reset()
    recorder = oplog.Recorder(ttnn_emulator)
    try:
        with TtnnEngine(tiny_model, tokenizer, ttnn_module=recorder, use_trace=False) as engine:
            before, executed_before = len(recorder.log), len(engine.device.ops)
            engine.encode_vision(np.zeros((1008, 1008, 3), np.uint8))
            executed = [op.name for op in engine.device.ops[executed_before:]]
            log = [record.to_json() for record in recorder.log[before:]]
            return log, engine.config, executed, engine.image_encoder.geometry
    finally:
        ttnn_emulator.reset()


def test_op_count_per_vit_block_is_pinned(recorded_forward):
    ops, config, _, _ = recorded_forward
    per_block = Counter(op["block"] for op in ops if op["stage"] == "vit_block")
    assert sorted(per_block) == list(range(config.layers))
    windowed = {per_block[i] for i in range(config.layers) if not config.is_global(i)}
    global_ = {per_block[i] for i in config.global_layers}
    assert windowed == {OPS_PER_WINDOWED_BLOCK}, f"windowed blocks now issue {windowed} ops"
    assert global_ == {OPS_PER_GLOBAL_BLOCK}, f"global blocks now issue {global_} ops"
    assert trace_cost.ops_per_block(ops) == {"windowed": windowed, "global": global_}


def test_op_count_outside_the_blocks_is_pinned(recorded_forward):
    ops, _, _, geometry = recorded_forward
    stages = Counter(op["stage"] for op in ops)
    assert stages["patch_embed"] == OPS_PATCH_EMBED
    assert stages["neck"] == OPS_NECK
    want = OPS_GEOMETRY_OUTSIDE_LAYERS + geometry.layers * OPS_GEOMETRY_PER_LAYER
    assert stages["geometry_encoder"] == want
    assert stages["other"] == 0, [op["op"] for op in ops if op["stage"] == "other"]


def test_recorder_logs_every_op_the_emulator_executes(recorded_forward):
    """The cost model prices exactly the ops the emulator ran, in their order."""
    ops, _, executed, _ = recorded_forward
    assert [op["op"].rsplit(".", 1)[-1] for op in ops] == executed


def test_recorder_logs_what_the_model_prices(recorded_forward):
    ops, config, _, _ = recorded_forward
    qkv = next(op for op in ops if op["op"] == "linear" and op["stage"] == "vit_block")
    assert qkv["fidelity"] == "HIFI2"
    assert qkv["inputs"][0]["shape"] == [1, config.tokens, config.hidden]
    assert qkv["inputs"][1]["dtype"] == "BFLOAT8_B" and qkv["outputs"][0]["memory"] == "L1"
    attention = next(op for op in ops if op["op"] == trace_cost.ATTENTION)
    assert attention["options"]["q_chunk_size"] > 0
    assert all(trace_cost.price(op).seconds >= 0 for op in ops)


def _tensor(shape, dtype="BFLOAT16", layout="TILE", memory="DRAM"):
    return {"shape": list(shape), "dtype": dtype, "layout": layout, "memory": memory}


def _op(name, inputs, outputs, fidelity=None, stage="vit_block", **options):
    return {
        "op": name,
        "stage": stage,
        "block": 0,
        "windowed": True,
        "inputs": inputs,
        "outputs": outputs,
        "fidelity": fidelity,
        "options": options,
    }


def test_linear_priced_as_matrix_flops_and_each_tensor_once():
    x, w = _tensor((1, 5184, 1024)), _tensor((1024, 4736), "BFLOAT8_B")
    out = _tensor((1, 5184, 4736))
    cost = trace_cost.price(_op("linear", [x, w], [out], "HIFI2"))
    assert cost.flops == 2 * 5184 * 1024 * 4736
    assert cost.dram_bytes == pytest.approx(5184 * 1024 * 2 + 1024 * 4736 * 1088 / 1024 + 5184 * 4736 * 2)
    assert cost.compute_s == pytest.approx(cost.flops / 332e12)
    assert cost.bound == "compute" and cost.seconds == cost.compute_s
    slower = trace_cost.price(_op("linear", [x, w], [out], "HIFI4"))
    assert slower.compute_s == pytest.approx(2 * cost.compute_s)
    on_110 = trace_cost.price(_op("linear", [x, w], [out], "HIFI2"), cores=110)
    assert on_110.compute_s == pytest.approx(cost.compute_s * 120 / 110)


def test_tile_padding_counts_in_flops_and_bytes():
    a, b = _tensor((1, 1, 33, 17)), _tensor((17, 40))
    cost = trace_cost.price(_op("matmul", [a, b], [_tensor((1, 1, 33, 40))], "LOFI"))
    assert cost.flops == 2 * 64 * 32 * 64
    assert trace_cost.tensor_bytes(a) == 64 * 32 * 2
    assert trace_cost.tensor_bytes(_tensor((1, 1, 33, 17), layout="ROW_MAJOR")) == 33 * 17 * 2


def test_elementwise_is_memory_bound():
    a = _tensor((1, 5184, 1024))
    cost = trace_cost.price(_op("add", [a, a], [a]))
    assert cost.flops == 0 and cost.fidelity is None and cost.bound == "memory"
    assert cost.seconds == pytest.approx(3 * 5184 * 1024 * 2 / 512e9)


def test_a_tensor_in_l1_moves_no_dram_bytes():
    dram, l1 = _tensor((1, 5184, 1024)), _tensor((1, 5184, 1024), memory="L1")
    size = trace_cost.tensor_bytes(dram)
    assert trace_cost.price(_op("add", [dram, dram], [dram])).dram_bytes == pytest.approx(3 * size)
    assert trace_cost.price(_op("add", [l1, dram], [l1])).dram_bytes == pytest.approx(size)
    q_dram, q_l1 = _tensor((9, 16, 576, 64)), _tensor((9, 16, 576, 64), memory="L1")
    attention = _op(trace_cost.ATTENTION, [q_l1, q_l1, q_l1], [q_dram], "HIFI2", q_chunk_size=64)
    assert trace_cost.price(attention).dram_bytes == pytest.approx(trace_cost.tensor_bytes(q_dram))


def test_reshape_is_free_only_when_it_can_be_a_view():
    view = _op("reshape", [_tensor((1, 5184, 3072))], [_tensor((9, 576, 3072))])
    copy = _op("reshape", [_tensor((5184, 1024))], [_tensor((72, 72, 1024))])  # 72 rows: not tile-aligned
    changed = _op("reshape", [_tensor((1, 5184, 3072))], [_tensor((1, 5184, 3, 1024))])
    assert trace_cost.price(view).dram_bytes == 0
    assert trace_cost.price(copy).dram_bytes > 0
    assert trace_cost.price(changed).dram_bytes > 0


def test_attention_rereads_keys_and_values_per_query_chunk():
    q = _tensor((1, 16, 5184, 64))
    narrow = _op(trace_cost.ATTENTION, [q, q, q], [q], "HIFI4", q_chunk_size=64, k_chunk_size=64)
    wide = _op(trace_cost.ATTENTION, [q, q, q], [q], "HIFI4", q_chunk_size=288, k_chunk_size=288)
    size = trace_cost.tensor_bytes(q)
    assert trace_cost.price(narrow).dram_bytes == pytest.approx(size * (2 + 2 * math.ceil(5184 / 64)))
    assert trace_cost.price(wide).dram_bytes == pytest.approx(size * (2 + 2 * 18))
    assert trace_cost.price(narrow).flops == 4 * 16 * 5184 * 5184 * 64


def test_attention_reads_a_broadcast_mask_once_per_batch_and_head():
    """The SDPA reader fetches the mask chunk of every (batch, head, q chunk, k chunk) it
    computes, so a mask that broadcasts over heads (the prompt masks, (B, 1, Sq, Sk)) is read
    once per head, and one over batch too once per batch and head."""
    q, k = _tensor((2, 8, 5184, 32)), _tensor((2, 8, 64, 32))
    per_prompt, shared = _tensor((2, 1, 5184, 64)), _tensor((1, 1, 5184, 64))
    per_head = _tensor((2, 8, 5184, 64))
    chunks = dict(q_chunk_size=5184, k_chunk_size=64)
    moved = {
        name: trace_cost.price(_op(trace_cost.ATTENTION, [q, k, k, mask], [q], "HIFI2", **chunks)).dram_bytes
        for name, mask in (("per prompt", per_prompt), ("shared", shared), ("per head", per_head))
    }
    without = trace_cost.price(_op(trace_cost.ATTENTION, [q, k, k], [q], "HIFI2", **chunks)).dram_bytes
    mask_reads = trace_cost.tensor_bytes(per_head)
    assert moved["per prompt"] == pytest.approx(without + mask_reads)
    assert moved["shared"] == pytest.approx(without + mask_reads)
    assert moved["per head"] == pytest.approx(without + mask_reads)


def test_rotary_embedding_reads_its_input_twice_and_its_tables_per_head():
    x, table = _tensor((9, 16, 576, 64)), _tensor((1, 1, 576, 64))
    cost = trace_cost.price(_op(trace_cost.ROTARY, [x, table, table], [x]))
    size = trace_cost.tensor_bytes(x)
    assert cost.flops == 0 and cost.bound == "memory"
    assert cost.dram_bytes == pytest.approx(3 * size + 9 * 16 * 2 * trace_cost.tensor_bytes(table))


def test_conv2d_priced_from_its_geometry():
    x, out = _tensor((1, 1, 5184, 256)), _tensor((1, 1, 5184, 256))
    conv = _op(
        "conv2d",
        [x, _tensor((256, 256, 3, 3), "FLOAT32", "ROW_MAJOR", "host")],
        [out],
        "HIFI2",
        stage="neck",
        in_channels=256,
        out_channels=256,
        input_height=72,
        input_width=72,
        kernel_size=[3, 3],
        stride=[1, 1],
        weights_dtype="BFLOAT8_B",
    )
    cost = trace_cost.price(conv)
    assert cost.flops == 2 * 72 * 72 * 256 * 256 * 9
    weights = 256 * 256 * 9 * 1088 / 1024
    assert cost.dram_bytes == pytest.approx(2 * trace_cost.tensor_bytes(x) + weights)


def test_stage_sums_add_up_to_the_frame():
    a = _tensor((1, 5184, 1024))
    ops = [
        _op("add", [a, a], [a], stage="patch_embed"),
        _op("add", [a, a], [a]),
        {**_op("add", [a, a], [a]), "block": 1, "windowed": False},
        _op("add", [a, a], [a], stage="neck"),
        _op("add", [a, a], [a], stage="geometry_encoder"),
    ]
    costs = trace_cost.price_all(ops)
    stages = trace_cost.by_stage(costs)
    assert [s.label for s in stages] == list(trace_cost.STAGE_ORDER)
    assert sum(s.seconds for s in stages) == pytest.approx(sum(c.seconds for c in costs))
    assert trace_cost.dominant(costs, top=1)[0].count == 1


def test_matmul_with_transposed_b_counts_the_rows_of_b():
    """x @ y^T (the mask logits: 224 query rows against 82944 pixel rows) is 2*M*K*N with N the
    rows of y, not its columns."""
    queries, pixels = _tensor((1, 224, 256)), _tensor((1, 82944, 256))
    cost = trace_cost.price(
        _op("matmul", [queries, pixels], [_tensor((1, 224, 82944))], "HIFI2", transpose_b=True)
    )
    assert cost.flops == 2 * 224 * 256 * 82944


def test_a_pipelined_stream_frame_hides_the_upload_behind_the_device_work():
    """One frame at a time a stream pays the upload and the device work; with frame N+1's upload
    on the second queue during frame N's work, only the longer of the two."""
    upload = trace_cost.upload_seconds()
    assert trace_cost.FRAME_UPLOAD_BYTES == 1008 * 1008 * 3
    assert upload == pytest.approx(3_048_192 / 63.015e9, rel=1e-4)
    assert trace_cost.stream_frame_seconds(0.002, 0.030, pipelined=False) == pytest.approx(0.032)
    assert trace_cost.stream_frame_seconds(0.002, 0.030, pipelined=True) == pytest.approx(0.030)
    assert trace_cost.stream_frame_seconds(0.050, 0.030, pipelined=True) == pytest.approx(0.050)


def test_calibrated_model_prices_every_op_of_the_image_path_above_its_roofline(recorded_forward):
    """The engine's own ops (with the options the recorder logs: fp32 accumulation, activations,
    program configs) never come out faster under the calibrated model than at the roofline, and the
    engine's compute configs carry fp32 accumulation into the attention's price."""
    from benchmarks.blackhole import calibrated_cost

    ops, *_ = recorded_forward
    for op in ops:
        assert calibrated_cost.price(op).seconds >= trace_cost.price(op).seconds, op["op"]
    attention = [op for op in ops if op["op"] == trace_cost.ATTENTION]
    assert attention
    assert all(op["options"]["compute_kernel_config.fp32_dest_acc_en"] for op in attention)
