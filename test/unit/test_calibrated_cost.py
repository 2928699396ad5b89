"""The calibrated cost model (benchmarks/blackhole/calibrated_cost.py): never faster than the roofline, within
its stated band of tt-metal's measured Blackhole workloads, and each term moves a prediction."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.blackhole import calibrated_cost, trace_cost, validation
from benchmarks.blackhole import calibration as cal

DTYPES = ("BFLOAT16", "BFLOAT8_B", "FLOAT32", "UINT8")
LAYOUTS = ("TILE", "ROW_MAJOR")
MEMORIES = ("DRAM", "L1")


def tensor(shape, dtype="BFLOAT16", layout="TILE", memory="DRAM"):
    return {"shape": list(shape), "dtype": dtype, "layout": layout, "memory": memory}


def op(name, inputs, outputs, fidelity=None, **options):
    return {
        "op": name,
        "stage": "test",
        "block": None,
        "windowed": None,
        "inputs": inputs,
        "outputs": outputs,
        "fidelity": fidelity,
        "options": options,
    }


@st.composite
def tensors(draw, rows=None, columns=None):
    dims = [
        draw(st.integers(1, 4)),
        rows or draw(st.integers(1, 4096)),
        columns or draw(st.integers(1, 4096)),
    ]
    return tensor(
        dims, draw(st.sampled_from(DTYPES)), draw(st.sampled_from(LAYOUTS)), draw(st.sampled_from(MEMORIES))
    )


@st.composite
def ops(draw):
    kind = draw(st.sampled_from(("linear", "matmul", "attention", "add", "softmax", "to_layout", "reshape")))
    fidelity = draw(st.sampled_from(("LOFI", "HIFI2", "HIFI4")))
    if kind in ("linear", "matmul"):
        m, k, n = (draw(st.integers(1, 8192)) for _ in range(3))
        a = draw(tensors(rows=m, columns=k))
        b = tensor([k, n], memory=draw(st.sampled_from(MEMORIES)))
        out = draw(tensors(rows=m, columns=n))
        extra = [tensor([1, n])] if draw(st.booleans()) else []
        options = {"activation": "gelu"} if draw(st.booleans()) else {}
        return op(kind, [a, b, *extra], [out], fidelity, **options)
    if kind == "attention":
        heads, sq, sk, dim = (
            draw(st.integers(1, 16)),
            draw(st.integers(32, 8192)),
            draw(st.integers(32, 8192)),
            64,
        )
        q = tensor([1, heads, sq, dim])
        kv = tensor([1, heads, sk, dim])
        mask = [tensor([1, 1, sq, sk])] if draw(st.booleans()) else []
        chunks = {"q_chunk_size": draw(st.sampled_from((32, 64, 128, 256, 512))), "k_chunk_size": 128}
        fp32 = {"compute_kernel_config.fp32_dest_acc_en": draw(st.booleans())}
        return op(trace_cost.ATTENTION, [q, kv, kv, *mask], [q], fidelity, **chunks, **fp32)
    x = draw(tensors())
    return op(kind, [x], [draw(tensors())])


@settings(max_examples=300)
@given(ops(), st.sampled_from((110, 120)))
def test_calibrated_never_beats_the_roofline(priced, grid):
    """Every efficiency is at most 1 and the grid at most the roofline's peak per core: no op can
    come out faster than its roofline."""
    cost = calibrated_cost.price(priced, grid=grid)
    assert cost.seconds >= trace_cost.price(priced).seconds


@pytest.mark.parametrize("workload", validation.workloads(), ids=lambda w: w.name)
def test_validation_workloads_within_the_band(workload):
    predicted = workload.predicted_s()
    assert abs(predicted / workload.measured_s - 1) <= cal.VALIDATION_BAND, (
        f"{workload.name}: predicted {predicted * 1e3:.2f} ms, measured {workload.measured_s * 1e3:.2f} ms"
    )


def test_validation_op_lists_are_the_models_flops():
    """The high-resolution ViT at hidden 2304, sequence 3072, 12 layers is 5.74 TFLOP per sample
    (QKV, attention, output, MLP: 2*S*H*3H + 4*S^2*H + 2*S*H^2 + 16*S*H^2 per layer)."""
    ops_ = validation.hires_vit(3072, 2304)
    total = sum(trace_cost.matrix_flops(o) for o in ops_)
    s, h = 3072, 2304
    expected = 12 * (2 * s * h * 3 * h + 4 * s * s * h + 2 * s * h * h + 16 * s * h * h)
    assert math.isclose(total, expected, rel_tol=1e-9)
    assert math.isclose(total / 1e12, 5.74, abs_tol=0.01)


@pytest.mark.parametrize("term", sorted(calibrated_cost.TERMS))
def test_removing_a_term_lowers_a_prediction(term):
    """Each term of the model adds time to at least one validation workload."""
    moved = [
        w.name
        for w in validation.workloads()
        if term in w.terms and w.predicted_s(w.terms - {term}) < w.predicted_s() - 1e-9
    ] + [name for name, sample in TERM_SAMPLES.items() if term in name and _removed(sample, term)]
    assert moved, f"removing {term!r} moves no prediction"


def _removed(sample, term):
    return (
        calibrated_cost.price(sample, terms=calibrated_cost.TERMS - {term}).seconds
        < calibrated_cost.price(sample).seconds
    )


TERM_SAMPLES = {
    "hidden: linear with activation, no program config": op(
        "linear",
        [tensor([1, 1, 5184, 1024]), tensor([1024, 4096]), tensor([1, 4096])],
        [tensor([1, 1, 5184, 4096], memory="L1")],
        "HIFI2",
        activation="gelu",
    ),
}


def test_the_gap_is_paid_once_per_op_and_hidden_op():
    ops_ = validation.hires_vit(3072, 2304)
    with_gap = calibrated_cost.total_seconds(ops_)
    without = calibrated_cost.total_seconds(ops_, terms=calibrated_cost.TERMS - {"gap"})
    hidden = sum(c.hidden_ops for c in calibrated_cost.price_all(ops_))
    assert math.isclose(with_gap - without, (len(ops_) + hidden) * cal.OP_GAP_S.value, rel_tol=1e-9)


def test_linear_activation_without_program_config_is_a_separate_op():
    x, w = tensor([1, 1, 5184, 1024]), tensor([1024, 4096])
    out = tensor([1, 1, 5184, 4096])
    plain = calibrated_cost.price(op("linear", [x, w], [out], "HIFI2"))
    activated = calibrated_cost.price(op("linear", [x, w], [out], "HIFI2", activation="gelu"))
    fused = calibrated_cost.price(
        op("linear", [x, w], [out], "HIFI2", activation="gelu", program_config=True)
    )
    assert activated.hidden_ops == 1 and fused.hidden_ops == 0
    assert activated.seconds > plain.seconds == fused.seconds


def test_narrow_row_major_rows_cost_their_page_efficiency():
    """A 32-wide ROW_MAJOR bf16 copy (64 B pages) runs at 9 % of DRAM bandwidth (tt-metal 55898)."""
    narrow = tensor([1, 1, 65536, 32], layout="ROW_MAJOR")
    copy = op("copy", [narrow], [narrow])
    terms = calibrated_cost.TERMS - {"launch", "gap"}
    cost = calibrated_cost.price(copy, terms=terms)
    assert math.isclose(cost.kernel_s / trace_cost.price(copy).seconds, 1 / 0.09, rel_tol=1e-9)


def test_fp32_accumulation_selects_the_slower_attention_kernel():
    q = tensor([16, 8, 4096, 64], memory="L1")
    streaming = op(trace_cost.ATTENTION, [q, q, q], [q], "HIFI2", q_chunk_size=256, k_chunk_size=256)
    fp32 = {**streaming, "options": {**streaming["options"], "compute_kernel_config.fp32_dest_acc_en": True}}
    terms = frozenset({"sdpa", "grid"})
    ratio = (
        calibrated_cost.price(fp32, terms=terms).seconds
        / calibrated_cost.price(streaming, terms=terms).seconds
    )
    assert math.isclose(ratio, cal.SDPA_FP32_ACC_FACTOR.value, rel_tol=1e-9)


def test_masked_attention_costs_the_masked_regime():
    """Compute-bound shapes (the prompt path's masked self-attention at 16 prompts' scale)."""
    q = tensor([16, 8, 4096, 64])
    kv = tensor([16, 8, 8192, 64])
    chunks = {"q_chunk_size": 256, "k_chunk_size": 256}
    plain = op(trace_cost.ATTENTION, [q, q, q], [q], "HIFI4", **chunks)
    masked = op(trace_cost.ATTENTION, [q, q, q, tensor([16, 1, 4096, 4096])], [q], "HIFI4", **chunks)
    cross = op(trace_cost.ATTENTION, [q, kv, kv], [q], "HIFI4", **chunks)
    terms = frozenset({"sdpa", "grid"})
    seconds = [calibrated_cost.price(o, terms=terms).seconds for o in (masked, plain)]
    assert math.isclose(seconds[0] / seconds[1], 18140 / 3680, rel_tol=1e-9)
    assert calibrated_cost.sdpa_regime(cross) == "cross"


def test_the_grid_is_the_devices():
    """110 cores (11x10, worker dispatch) by default: a compute-bound matmul takes 120/110 of its
    time on 120 cores."""
    x, w = tensor([1, 1, 5120, 5632]), tensor([5632, 5632])
    matmul = op("matmul", [x, w], [tensor([1, 1, 5120, 5632])], "HIFI2")
    terms = frozenset({"grid"})
    on_110 = calibrated_cost.price(matmul, terms=terms).kernel_s
    on_120 = calibrated_cost.price(matmul, grid=120, terms=terms).kernel_s
    assert math.isclose(on_110 / on_120, 120 / 110, rel_tol=1e-9)


@pytest.mark.parametrize(
    ("table", "fidelity"), [(cal.MATMUL_11X10, "HIFI2"), (cal.MATMUL_11X10_LOFI, "LOFI")]
)
def test_matmul_efficiency_is_the_gemm_reports_at_its_shapes(table, fidelity):
    """At each shape of the report whose FLOPs no other shape shares, the report's own figure."""
    flops = [2.0 * m * k * n for m, k, n, _ in table]
    for (*_, utilization), work in zip(table, flops, strict=True):
        if flops.count(work) == 1:
            assert math.isclose(calibrated_cost.matmul_efficiency(work, 110, fidelity), utilization)


def test_every_fact_names_its_source():
    for fact in cal.facts():
        assert fact.source.strip(), fact.name
        assert fact.value > 0, fact.name


def test_oplog_records_fp32_accumulation():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from ttnn_mock import oplog

    config = SimpleNamespace(math_fidelity="HiFi2", math_approx_mode=False, fp32_dest_acc_en=True)
    fidelity, options = oplog._options((), {"compute_kernel_config": config, "program_config": object()})
    assert fidelity == "HIFI2"
    assert options["compute_kernel_config.fp32_dest_acc_en"] is True
    assert options["program_config"] is True
