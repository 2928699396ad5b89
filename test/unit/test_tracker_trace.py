"""benchmarks/tracking/tracker_trace.py: SAM 3's full-size tracker recorded as the op log a chip
port would run."""

from __future__ import annotations

import pytest

from benchmarks.blackhole import calibrated_cost, trace_cost
from benchmarks.tracking import tracker_trace

#: One memory frame more: per memory-attention layer, 5,184 queries against 5,184 more keys of
#: width 256 (QK^T and PV), and the key and value projections of 5,184 more tokens (64 -> 256).
EXTRA_FRAME_FLOPS = 4 * (4 * 5184 * 5184 * 256 + 2 * 2 * 5184 * 64 * 256)


@pytest.fixture(scope="module")
def full_memory():
    return tracker_trace.tracker_op_log(memory_frames=7)


def _stage_flops(ops, stage: str) -> float:
    return sum(trace_cost.matrix_flops(op) for op in ops if op["stage"] == stage)


def test_the_op_log_counts_the_matrix_work_torch_counts(full_memory) -> None:
    ops, torch_flops = full_memory
    assert {op["stage"] for op in ops} == set(torch_flops)
    for stage in ("memory attention", "memory encoder"):
        assert _stage_flops(ops, stage) == pytest.approx(torch_flops[stage], rel=1e-6)
    # the mask decoder's few prompt tokens fill whole tiles: more, never less
    assert (
        torch_flops["mask decoder"] <= _stage_flops(ops, "mask decoder") <= 1.3 * torch_flops["mask decoder"]
    )


def test_a_miscounted_convolution_shows_in_the_check(full_memory) -> None:
    """Negative control: the memory fuser's depthwise 7x7 convolutions counted over every input
    channel (their groups forgotten) break the agreement with torch's count."""
    ops, torch_flops = full_memory
    wrong = [
        {**op, "options": {**op["options"], "in_channels": op["options"]["out_channels"]}}
        if op["op"] == "conv2d" and op["stage"] == "memory encoder" and op["options"]["in_channels"] == 1
        else op
        for op in ops
    ]
    assert _stage_flops(wrong, "memory encoder") > 2 * torch_flops["memory encoder"]


def test_memory_attention_grows_by_one_frame_of_keys_per_memory_frame(full_memory) -> None:
    ops, _ = full_memory
    one_frame, _ = tracker_trace.tracker_op_log(memory_frames=1)
    grown = _stage_flops(ops, "memory attention") - _stage_flops(one_frame, "memory attention")
    assert grown == pytest.approx(6 * EXTRA_FRAME_FLOPS, rel=1e-6)
    assert calibrated_cost.total_seconds(ops) > calibrated_cost.total_seconds(one_frame)


def test_every_op_is_one_the_cost_models_price(full_memory) -> None:
    ops, _ = full_memory
    for op in ops:
        assert op["inputs"] and op["outputs"]
        assert all(t["dtype"] == "BFLOAT16" and t["memory"] == "DRAM" for t in op["inputs"] + op["outputs"])
    names = {op["op"] for op in ops}
    assert {"linear", "conv2d", trace_cost.ATTENTION} <= names
    assert not names & {"view", "unsqueeze", "__getitem__", "size"}  # views cost nothing
    prices = tracker_trace.price_stages(*full_memory)
    assert all(p.calibrated_ms >= p.roofline_ms > 0 for p in prices)
