"""A calibrated cost model beside the roofline: each op at the efficiency tt-metal measures on
Blackhole for its class and shape (benchmarks/blackhole/calibration.py holds the figures and their sources).

Same op logs as benchmarks/blackhole/trace_cost.py (the roofline), same FLOP and DRAM-byte counts; what
changes, term by term (each can be switched off, `TERMS`, to see what it moves):
- grid: the matrix peak of the cores the op runs on: an op's own `cores` when its log names
  them (the validation workloads' explicit grids), else the device grid (110 by default, the
  11x10 compute grid worker dispatch leaves a p150a), not the roofline's 120;
- matmul: matmul, linear and conv2d at the out-of-box utilization tt-metal's GEMM report
  measures on the 11x10 grid, interpolated on the FLOPs each core does (log scale, clamped to
  the table's ends): its bfloat8_b LoFi table for LoFi, its bf16 HiFi2 table for the rest;
- sdpa: fused attention at the math-busy fraction measured for its (q, k) chunk sizes (the
  nearest measured pair in log2 space), scaled to FLOP utilization at the one point whose wall
  is published; a masked attention at the masked regime's cycles per inner iteration over the
  non-causal one, a cross attention (Sq != Sk) at the cross regime's; with fp32 accumulation the
  non-streaming kernel's penalty;
- dram: each DRAM tensor's bytes at the efficiency of its page size (a tile for TILE, a row for
  ROW_MAJOR): small pages are request-rate bound;
- sfpu: every elementwise, normalization and softmax op at the SFPU cycles per output tile
  measured for SDPA's exp, spread over the op's cores (data movement ops do none);
- launch: every op's fixed launch, start and tail cycles inside its device time;
- gap: the time a trace pays between two ops (not in a device-kernel-only figure);
- hidden: ttnn.linear's separate activation op (activation= without a program config) and
  separate bias op (an L1 output without a program config), each one more op over the output.
Per op: kernel = max(compute / efficiency, SFPU time, DRAM time at page efficiency) + launch; the op's time
is kernel + gap, plus its hidden ops priced the same way. A prediction of a chip's latency, not
a measurement: it is only as good as the validation table shows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from . import calibration as cal
from . import trace_cost

TERMS = frozenset({"grid", "matmul", "sdpa", "dram", "sfpu", "launch", "gap", "hidden"})
#: Ops that only move or re-lay data: no SFPU work per tile.
DATA_MOVEMENT = frozenset(
    {
        "to_memory_config",
        "reshard",
        "reallocate",
        "reshape",
        "concat",
        "fold",
        "to_layout",
        "tilize",
        "untilize",
        "permute",
        "transpose",
        "slice",
        "pad",
        "copy",
        "typecast",
        "transformer.split_query_key_value_and_split_heads",
        "transformer.concatenate_heads",
        "experimental.nlp_create_qkv_heads",
        "experimental.nlp_concat_heads",
        "experimental.rotary_embedding",
        "embedding",
    }
)
FIDELITY_PASSES = {"LOFI": 1, "HIFI2": 2, "HIFI3": 3, "HIFI4": 4}
MATMUL_CLASS = ("linear", "matmul", trace_cost.CONV)
FP32_KEY = "fp32_dest_acc_en"
TILE_ELEMENTS = trace_cost.TILE * trace_cost.TILE


@dataclass(frozen=True)
class CalibratedCost:
    """One op priced: its roofline time and the calibrated time, with the parts of the latter."""

    op: str
    stage: str
    roofline_s: float
    kernel_s: float
    gap_s: float
    hidden_s: float
    hidden_ops: int

    @property
    def seconds(self) -> float:
        return self.kernel_s + self.gap_s + self.hidden_s


def core_peak_flops(fidelity: str) -> float:
    """One core's matrix peak at `fidelity`, FLOP/s."""
    return cal.CORE_TFLOPS_LOFI.value * 1e12 / FIDELITY_PASSES[fidelity]


def _interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through sorted (x, y) points, clamped at both ends (where two points share
    an x, the first one's y holds up to it)."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def _matmul_points(table: Sequence[tuple[int, int, int, float]]) -> list[tuple[float, float]]:
    cores = cal.DEFAULT_GRID.value
    return sorted((math.log(2.0 * m * k * n / cores), util) for m, k, n, util in table)


MATMUL_POINTS = {"LOFI": _matmul_points(cal.MATMUL_11X10_LOFI), "HIFI": _matmul_points(cal.MATMUL_11X10)}


def matmul_efficiency(flops: float, cores: int, fidelity: str = "HIFI2") -> float:
    """Out-of-box matmul utilization for an op of `flops` spread over `cores` at `fidelity`
    (the LoFi table for LoFi, the HiFi2 one for every higher fidelity)."""
    points = MATMUL_POINTS["LOFI" if fidelity == "LOFI" else "HIFI"]
    return _interpolate(points, math.log(max(flops / cores, 1.0)))


def sdpa_efficiency(q_chunk: int, k_chunk: int) -> float:
    """FLOP utilization of the streaming SDPA kernel at the measured chunk pair nearest (q, k)."""

    def distance(pair: tuple[int, int]) -> float:
        return (math.log2(pair[0]) - math.log2(q_chunk)) ** 2 + (math.log2(pair[1]) - math.log2(k_chunk)) ** 2

    measured = dict(cal.SDPA_MATH_BUSY)
    measured[(256, 256)] = cal.SDPA_BEST_BUSY.value
    busy = measured[min(measured, key=distance)]
    return busy * sdpa_flop_per_busy()


def sdpa_flop_per_busy() -> float:
    """FLOP utilization per unit of math busy at the anchor (non-causal q128 k128, 110 cores)."""
    flops = 4.0 * 32 * 4096 * 4096 * 128
    floor = flops / (core_peak_flops("HIFI2") * cal.DEFAULT_GRID.value)
    return (floor / cal.SDPA_ANCHOR_WALL_S.value) / cal.SDPA_MATH_BUSY[(128, 128)]


def sdpa_regime(op: dict[str, Any]) -> str:
    inputs = op["inputs"]
    if len(inputs) >= 4:
        return "masked"
    if inputs[0]["shape"][-2] != inputs[1]["shape"][-2]:
        return "cross"
    return "non-causal"


def page_bytes(tensor: dict[str, Any]) -> float:
    """Bytes per DRAM page: one tile for TILE, one row for ROW_MAJOR."""
    per_value = trace_cost.BYTES_PER_VALUE.get(tensor["dtype"], 2.0)
    if tensor["layout"] == "TILE":
        return TILE_ELEMENTS * per_value
    return (tensor["shape"][-1] if tensor["shape"] else 1) * per_value


def dram_efficiency(tensor: dict[str, Any]) -> float:
    return _interpolate(cal.DRAM_PAGE_EFFICIENCY, page_bytes(tensor))


def _dram_factor(op: dict[str, Any]) -> float:
    """The op's DRAM time over its roofline DRAM time: bytes-weighted 1 / page efficiency."""
    tensors = [t for t in op["inputs"] + op["outputs"] if t["memory"] == "DRAM"]
    moved = sum(trace_cost.tensor_bytes(t) for t in tensors)
    if not moved:
        return 1.0
    return sum(trace_cost.tensor_bytes(t) / dram_efficiency(t) for t in tensors) / moved


def _fp32_accumulation(op: dict[str, Any]) -> bool:
    return any(key.endswith(FP32_KEY) and value for key, value in op.get("options", {}).items())


def _compute_seconds(op: dict[str, Any], flops: float, cores: int, terms: frozenset[str]) -> float:
    fidelity = op.get("fidelity") or trace_cost.DEFAULT_FIDELITY
    seconds = flops / (core_peak_flops(fidelity) * cores)
    name = op["op"]
    if name in MATMUL_CLASS and "matmul" in terms:
        seconds /= matmul_efficiency(flops, cores, fidelity)
    if name == trace_cost.ATTENTION and "sdpa" in terms:
        options = op.get("options", {})
        sequence = op["inputs"][0]["shape"][-2]
        q_chunk = options.get("q_chunk_size") or sequence
        k_chunk = options.get("k_chunk_size") or op["inputs"][1]["shape"][-2]
        regime = sdpa_regime(op)
        seconds /= sdpa_efficiency(q_chunk, k_chunk)
        seconds *= cal.SDPA_INNER_CYCLES[regime] / cal.SDPA_INNER_CYCLES["non-causal"]
        if _fp32_accumulation(op):
            seconds *= cal.SDPA_FP32_ACC_FACTOR.value
    return seconds


def sfpu_seconds(op: dict[str, Any], cores: int) -> float:
    """SFPU time of an elementwise-like op: its output tiles per core at the measured cycles."""
    if op["op"] in DATA_MOVEMENT or op["op"] in MATMUL_CLASS or op["op"] == trace_cost.ATTENTION:
        return 0.0
    tiles = sum(math.prod(trace_cost.padded(t["shape"], "TILE")) / TILE_ELEMENTS for t in op["outputs"])
    per_core = math.ceil(tiles / cores)
    return per_core * cal.SFPU_CYCLES_PER_TILE.value / cal.CLOCK_HZ.value


def _hidden_ops(op: dict[str, Any]) -> list[dict[str, Any]]:
    """ttnn.linear's separate activation and bias ops, as unary ops over its output."""
    if op["op"] != "linear" or op.get("options", {}).get("program_config"):
        return []
    output = op["outputs"][0] if op["outputs"] else None
    if output is None:
        return []
    hidden = []
    unary = {**op, "op": "hidden unary", "inputs": [output], "outputs": [output], "options": {}}
    if op.get("options", {}).get("activation"):
        hidden.append(unary)
    if len(op["inputs"]) >= 3 and output["memory"] == "L1":
        hidden.append({**unary, "op": "hidden bias add"})
    return hidden


def _kernel_seconds(op: dict[str, Any], grid: int, terms: frozenset[str]) -> tuple[float, float]:
    """(calibrated kernel time, roofline time) of one op."""
    roofline = trace_cost.price(op)
    cores = (op.get("cores") or grid) if "grid" in terms else trace_cost.PEAK_CORES
    compute = _compute_seconds(op, roofline.flops, cores, terms) if roofline.flops else 0.0
    memory = roofline.memory_s * (_dram_factor(op) if "dram" in terms else 1.0)
    sfpu = sfpu_seconds(op, cores) if "sfpu" in terms else 0.0
    launch = cal.KERNEL_FIXED_CYCLES.value / cal.CLOCK_HZ.value if "launch" in terms else 0.0
    return max(compute, sfpu, memory) + launch, roofline.seconds


def price(
    op: dict[str, Any], grid: int = int(cal.DEFAULT_GRID.value), terms: Iterable[str] = TERMS
) -> CalibratedCost:
    """One op at the calibrated model, with `terms` (a subset of TERMS) switched on."""
    active = frozenset(terms)
    kernel, roofline = _kernel_seconds(op, grid, active)
    gap = cal.OP_GAP_S.value if "gap" in active else 0.0
    hidden = _hidden_ops(op) if "hidden" in active else []
    hidden_s = sum(_kernel_seconds(h, grid, active)[0] + gap for h in hidden)
    return CalibratedCost(op["op"], op["stage"], roofline, kernel, gap, hidden_s, len(hidden))


def price_all(
    ops: Iterable[dict[str, Any]], grid: int = int(cal.DEFAULT_GRID.value), terms: Iterable[str] = TERMS
) -> list[CalibratedCost]:
    active = frozenset(terms)
    return [price(op, grid, active) for op in ops]


def total_seconds(
    ops: Iterable[dict[str, Any]], grid: int = int(cal.DEFAULT_GRID.value), terms: Iterable[str] = TERMS
) -> float:
    return sum(c.seconds for c in price_all(ops, grid, terms))
