"""Tables of the calibrated cost model: the facts it rests on, its validation against tt-metal's
measured Blackhole workloads, and our traces priced by it beside the roofline.

Printed by the blackhole section (`python -m benchmarks --only blackhole`); the facts and the
validation need nothing but this package, the traces come from the section's op logs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ..common import report
from . import calibrated_cost, prompt_trace, trace_cost, validation
from . import calibration as cal


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def print_facts() -> None:
    """Every figure the calibrated model uses, with its source."""
    report.title("calibration: what tt-metal measures on Blackhole (benchmarks/blackhole/calibration.py)")
    rows = [[f.name, f"{f.value:g}", f.unit, f.source] for f in cal.facts()]
    report.table(["fact", "value", "unit", "source (paths and issues: tenstorrent/tt-metal)"], rows)
    lofi = {(m, k, n): u for m, k, n, u in cal.MATMUL_11X10_LOFI}
    cores = cal.DEFAULT_GRID.value
    report.title(
        f"out-of-box matmul utilization on the 11x10 grid, traced ({cal.GEMM_REPORT}): "
        "interpolated on FLOPs per core"
    )
    report.table(
        ["M", "K", "N", "GFLOP per core", "bf16 HiFi2", "bfloat8_b LoFi"],
        [
            [
                m,
                k,
                n,
                f"{2 * m * k * n / cores / 1e9:.3f}",
                f"{u:.0%}",
                f"{lofi[(m, k, n)]:.0%}",
            ]
            for m, k, n, u in cal.MATMUL_11X10
        ],
    )
    flop_per_busy = calibrated_cost.sdpa_flop_per_busy()
    report.title("fused attention (tt-metal issues 55758, 55756, 56693)")
    busy = dict(cal.SDPA_MATH_BUSY)
    busy[(256, 256)] = cal.SDPA_BEST_BUSY.value
    report.table(
        ["q chunk", "k chunk", "math busy", "FLOP utilization priced"],
        [[q, k, f"{b:.0%}", f"{b * flop_per_busy:.0%}"] for (q, k), b in sorted(busy.items())],
    )
    base = cal.SDPA_INNER_CYCLES["non-causal"]
    print(
        "regimes, cycles per inner iteration (55756): "
        + ", ".join(
            f"{name} {cycles:,} ({cycles / base:.2f}x)" for name, cycles in cal.SDPA_INNER_CYCLES.items()
        )
        + f"; fp32 accumulation: x{cal.SDPA_FP32_ACC_FACTOR.value} (56693)"
    )
    print(
        "DRAM efficiency by page (55898): "
        + ", ".join(f"{page} B {eff:.0%}" for page, eff in cal.DRAM_PAGE_EFFICIENCY)
        + " (a TILE page is one tile, a ROW_MAJOR page one row)"
    )
    print(f"not priced: {cal.FP32_MATMUL_NOTE}")
    print(f"priced: {cal.HIDDEN_OPS_NOTE}")


def print_validation() -> list[str]:
    """Predicted against measured for each workload; returns the ones outside the band."""
    band = cal.VALIDATION_BAND
    report.title(
        f"calibrated model against tt-metal's measured Blackhole workloads (goal: within +-{band:.0%})"
    )
    rows = []
    outside = []
    for workload in validation.workloads():
        ops = workload.ops()
        predicted = workload.predicted_s()
        roofline = sum(trace_cost.price(op).seconds for op in ops)
        error = predicted / workload.measured_s - 1
        if abs(error) > band:
            outside.append(workload.name)
        rows.append(
            [
                workload.name,
                len(ops),
                workload.measure,
                _ms(workload.measured_s),
                _ms(predicted),
                f"{error:+.0%}",
                _ms(roofline),
            ]
        )
    report.table(
        ["workload", "ops", "measured as", "measured ms", "calibrated ms", "error", "roofline ms"], rows
    )
    print(
        "op lists: benchmarks/blackhole/validation.py, from the structure of each model's Blackhole "
        "code; its matmuls pass no compute config and run at ttnn's default, LoFi; the device-kernel "
        "figure is priced without the gap between ops"
    )
    return outside


def _stage_rows(ops: list[dict[str, Any]], grid: int) -> tuple[list[list[object]], float, float]:
    calibrated = calibrated_cost.price_all(ops, grid)
    by_stage: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    order: list[str] = []
    for op, cost in zip(ops, calibrated, strict=True):
        label = trace_cost.stage_label(op["stage"], op.get("windowed"))
        if label not in by_stage:
            order.append(label)
        entry = by_stage[label]
        entry[0] += 1 + cost.hidden_ops
        entry[1] += cost.roofline_s
        entry[2] += cost.seconds
    rows = [
        [label, int(by_stage[label][0]), _ms(by_stage[label][1]), _ms(by_stage[label][2])] for label in order
    ]
    return rows, sum(c.roofline_s for c in calibrated), sum(c.seconds for c in calibrated)


def print_image_trace(ops: list[dict[str, Any]], grid: int) -> float:
    """The image trace per stage, roofline and calibrated; returns the calibrated seconds."""
    report.title(f"image trace, calibrated ({grid} cores) beside the roofline (120 cores)")
    rows, roofline, calibrated = _stage_rows(ops, grid)
    hidden = sum(c.hidden_ops for c in calibrated_cost.price_all(ops, grid))
    rows.append(["image trace", len(ops) + hidden, _ms(roofline), _ms(calibrated)])
    report.table(["stage", "ops (hidden included)", "roofline ms", "calibrated ms"], rows)
    print_biggest(ops, grid, "image trace")
    return calibrated


def print_biggest(ops: Iterable[dict[str, Any]], grid: int, name: str, top: int = 8) -> None:
    """The op groups that cost the most by the calibrated model (what an optimisation should target)."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    total = 0.0
    for op in ops:
        cost = calibrated_cost.price(op, grid)
        label = trace_cost.stage_label(op["stage"], op.get("windowed"))
        group = groups[(label, trace_cost._signature(op))]
        group[0] += 1
        group[1] += cost.seconds
        total += cost.seconds
    report.title(f"{name}: the costliest op groups, calibrated")
    largest = sorted(groups.items(), key=lambda kv: -kv[1][1])[:top]
    report.table(
        ["stage", "op (input shapes)", "runs", "calibrated ms", "of trace"],
        [[s, sig, int(n), _ms(sec), f"{sec / total:.0%}"] for (s, sig), (n, sec) in largest],
    )


def print_frames(image_s: float, logs: dict[int, list[dict[str, Any]]], grid: int) -> None:
    """Prompt traces and the frame, calibrated beside the roofline, per prompt count."""
    upload = trace_cost.upload_seconds()
    rows = []
    for prompts, ops in logs.items():
        replay = [op for op in ops if op["stage"] != prompt_trace.MASK_READ]
        read = [op for op in ops if op["stage"] == prompt_trace.MASK_READ]
        calibrated = calibrated_cost.total_seconds(replay, grid)
        read_s = calibrated_cost.total_seconds(read, grid)
        roofline = sum(trace_cost.price(op).seconds for op in replay)
        rows.append(
            [
                prompts,
                len(replay) + sum(c.hidden_ops for c in calibrated_cost.price_all(replay, grid)),
                _ms(roofline),
                _ms(calibrated),
                _ms(read_s),
                _ms(upload + image_s + calibrated + read_s),
            ]
        )
    report.title(f"prompt traces and the frame, calibrated ({grid} cores)")
    report.table(
        [
            "prompts",
            "replay ops (hidden included)",
            "prompt trace roofline ms",
            "prompt trace calibrated ms",
            "mask read calibrated ms",
            "frame calibrated ms (upload + image + prompt + read)",
        ],
        rows,
    )
    first = next(iter(logs))
    replay = [op for op in logs[first] if op["stage"] != prompt_trace.MASK_READ]
    print_biggest(replay, grid, f"prompt trace, {first} prompt(s)")
