"""Blackhole section: host work per frame, the image path on a mock p150a (real ttnn 0.81.1, no
card) and its cost model.

First the host table (benchmarks/blackhole/blackhole_host.py: host work per frame, today's input path beside
a uint8 upload, with the wheel's own conversions).

Then the calibrated cost model's ground (benchmarks/blackhole/calibration_report.py): the figures tt-metal
publishes for Blackhole with their sources, and the model's predictions for tt-metal's measured
workloads beside those measurements. After the roofline tables below, the same traces and the frame
priced by the calibrated model, and the op groups that cost the most by it.

Tables from one forward of the engine's image path, run by tools/ttnn_mock/image_path.py in
.venv-ttnn with NO_DISPATCH graph capture, one capture per stage (and once more, one per op):
- per-core peak L1 of each stage as the real library sizes it (L1 buffers, circular buffers,
  dataflow buffers, their peak total), beside the 1,428,352 B L1 bank; buffers made before a
  stage (weights, the stage's input) are not counted in it; then the ops whose own peak comes
  nearest the bank;
- the roofline cost model of the same forward (benchmarks/blackhole/trace_cost.py): FLOPs, DRAM bytes
  and time at p150a peaks per stage and for the frame, beside the ViT's physical floor and
  the 40 ms goal, and the ops that take the most modelled time;
- the prompt trace beside it (benchmarks/blackhole/prompt_trace.py: the sequence the engine's chip prompt
  path replays per prompt batch, and its mask read after the replay, logged by the strict
  emulator on shape-only tensors for 1, 4 and 16 prompts), per stage and per trace, and the
  predicted device time per frame for 1, 4 and 16 prompts against the goals;
- (full size) the fused attention at each (q, k) chunk pair that divides SAM 3's sequences:
  whether the real library accepts it (tools/ttnn_mock/sdpa_chunks.py), its circular buffers per
  core, its modelled time over the blocks of each kind, and its q-chunk tasks per core (what the
  roofline cannot see: a last round that only some cores run).

Full size: SAM 3's real architecture (random-free: the weights are zeros, nothing computes), on
the harvested 11x10 grid of a real p150a and on an unharvested 13x10 one. --quick: the tiny
model on 11x10 only, and the tiny model's prompt trace (a smoke run: the numbers say nothing).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..common import report
from . import blackhole_host, calibration_report, prompt_trace, trace_cost

REPO = Path(__file__).resolve().parents[2]
#: The interpreter with the real ttnn wheel: this one where it imports ttnn (the ubuntu24.04 row),
#: else a .venv-ttnn made by hand.
TTNN_PYTHON = (
    Path(sys.executable) if importlib.util.find_spec("ttnn") else REPO / ".venv-ttnn" / "bin" / "python"
)
RUNNER = REPO / "tools" / "ttnn_mock" / "image_path.py"
ATTENTION_TOOL = REPO / "tools" / "ttnn_mock" / "sdpa_chunks.py"
L1_BANK_BYTES = 1_428_352
MAX_L1_BYTES = 1_572_864
GRIDS = {"harvested (11x10, like a p150a)": 3, "unharvested (13x10)": 0}


def _mock_run(manifest_path: Path, harvest: int, out: Path, per_op: bool = False) -> dict[str, Any]:
    unit = "op" if per_op else "stage"
    report.progress(f"mock p150a, harvest mask {harvest}: NO_DISPATCH forward, one capture per {unit}")
    command = [str(TTNN_PYTHON), str(RUNNER), str(manifest_path), "--harvest", str(harvest)]
    command += ["--mode", "no_dispatch", "--json", str(out), *(["--per-op"] if per_op else [])]
    done = subprocess.run(
        command,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result = json.loads(out.read_text()) if out.exists() else {}
    if not result.get("ok") and "unavailable" not in result:
        detail = result.get("error") or done.stderr[-1500:]
        raise RuntimeError(f"the mock run failed (exit {done.returncode}): {detail}")
    return result


def _attention_run(harvest: int, out: Path) -> dict[str, Any]:
    report.progress(f"mock p150a, harvest mask {harvest}: fused attention at each chunk size")
    command = [str(TTNN_PYTHON), str(ATTENTION_TOOL), "--harvest", str(harvest), "--json", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    result = json.loads(out.read_text()) if out.exists() else {}
    if not result.get("ok"):
        raise RuntimeError(f"the attention chunk run failed (exit {done.returncode}): {done.stderr[-1500:]}")
    return result


def blocks_of_each_kind(ops: list[dict[str, Any]]) -> dict[str, int]:
    kinds: dict[int, str] = {}
    for op in ops:
        if op["stage"] == "vit_block":
            kinds[op["block"]] = "windowed" if op["windowed"] else "global"
    return {kind: sum(1 for k in kinds.values() if k == kind) for kind in ("windowed", "global")}


def _kib(value: int) -> str:
    return f"{value / 1024:,.0f}"


def peak_rows(stages: list[dict[str, Any]]) -> list[list[object]]:
    """One row per stage kind; blocks of a kind show their largest peak."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for stage in stages:
        grouped.setdefault(trace_cost.stage_label(stage["stage"], stage["windowed"]), []).append(stage)
    rows = []
    for label, members in grouped.items():
        worst = max(members, key=lambda s: s["peak_total"])
        name = f"{label} (max of {len(members)})" if len(members) > 1 else label
        rows.append(
            [
                name,
                worst["ops"],
                _kib(worst["peak_l1"]),
                _kib(worst["peak_cb"]),
                _kib(worst["peak_dataflow_buffer"]),
                _kib(worst["peak_total"]),
                f"{worst['peak_total'] / L1_BANK_BYTES:.0%}",
                f"{worst['peak_total'] / MAX_L1_BYTES:.0%}",
            ]
        )
    return rows


def print_peaks(grid_name: str, result: dict[str, Any]) -> None:
    x, y = result["grid"]
    report.title(f"per-core peak L1 by stage, NO_DISPATCH: {grid_name}, {x}x{y} compute grid")
    report.table(
        [
            "stage",
            "ops",
            "L1 buffers KiB",
            "CBs KiB",
            "dataflow bufs KiB",
            "total KiB",
            "of L1 bank",
            "of L1",
        ],
        peak_rows(result["stages"]),
    )
    print(
        f"L1 bank {L1_BANK_BYTES:,} B per core (the allocator's limit for buffers), {MAX_L1_BYTES:,} B "
        "L1 in all (the circular-buffer limit); the total is the stage's worst moment, every kind "
        "together (buffers of its earlier ops still alive included); weights and each stage's input "
        "live in DRAM and are not counted."
    )


def print_largest_ops(result: dict[str, Any], top: int = 6) -> None:
    """The ops whose own per-core peak comes nearest the L1 bank (one capture per op)."""
    x, y = result["grid"]
    seen: dict[tuple, dict[str, Any]] = {}
    for entry in result["stages"]:
        label = trace_cost.stage_label(entry["stage"], entry["windowed"])
        shapes = " x ".join("x".join(str(d) for d in shape) for shape in entry["inputs"])
        key = (label, f"{entry['op']}({shapes})")
        if key not in seen or entry["peak_total"] > seen[key]["peak_total"]:
            seen[key] = {**entry, "label": label, "signature": key[1]}
    largest = sorted(seen.values(), key=lambda e: e["peak_total"], reverse=True)[:top]
    report.title(f"ops nearest the L1 bank, one NO_DISPATCH capture per op, {x}x{y} grid")
    report.table(
        [
            "stage",
            "op (input shapes)",
            "L1 buffers KiB",
            "CBs KiB",
            "dataflow bufs KiB",
            "total KiB",
            "of L1 bank",
        ],
        [
            [
                e["label"],
                e["signature"],
                _kib(e["peak_l1"]),
                _kib(e["peak_cb"]),
                _kib(e["peak_dataflow_buffer"]),
                _kib(e["peak_total"]),
                f"{e['peak_total'] / L1_BANK_BYTES:.0%}",
            ]
            for e in largest
        ],
    )


def _attention_ms(dims: list[int], chunks: list[int], fidelity: str, runs: int) -> float:
    tensor = {"shape": dims, "dtype": "BFLOAT16", "layout": "TILE", "memory": "DRAM"}
    op = {
        "op": trace_cost.ATTENTION,
        "stage": "vit_block",
        "inputs": [tensor] * 3,
        "outputs": [tensor],
        "fidelity": fidelity,
        "options": {"q_chunk_size": chunks[0], "k_chunk_size": chunks[1]},
    }
    return trace_cost.price(op).seconds * runs * 1e3


def tasks_per_core(dims: list[int], q_chunk: int, cores: int) -> float:
    """The kernel's units of work (one q chunk of one batch and head) per core: below 1 leaves
    cores idle, and a fraction means a last round that only some cores run (the model sees neither)."""
    batch, heads, sequence = dims[0], dims[1], dims[2]
    return batch * heads * (sequence // q_chunk) / cores


def short_reason(error: str) -> str:
    """A refusal in a few words: the rule it broke, or the L1 the circular buffers wanted."""
    grown = re.search(r"grow to (\d+) B which is beyond max L1 size of (\d+) B", error)
    if grown:
        return f"no: CBs {int(grown.group(1)) / 1024:,.0f} KiB > L1 {int(grown.group(2)) / 1024:,.0f} KiB"
    if "TILE_WIDTH" in error or "multiple of" in error:
        return "no: not a multiple of 32"
    return "no: " + error[:40]


def print_attention_chunks(result: dict[str, Any], blocks: dict[str, int]) -> None:
    """Each (q, k) chunk pair: does the real library accept it, its circular buffers, its modelled
    time, and the q-chunk tasks per core."""
    x, y = result["grid"]
    q_chunk, k_chunk = result["engine_chunks"]
    exp = "approximate" if result.get("exp_approx") else "exact"
    report.title(
        f"fused attention chunk sizes (q, k) on the real library, {x}x{y} grid, {result['fidelity']}, "
        f"{exp} exp, operands in DRAM (the engine uses q {q_chunk}, k {k_chunk})"
    )
    cells: dict[tuple[int, int], dict[str, list[object]]] = {}
    for entry in result["rows"]:
        chunks = tuple(entry["chunks"])
        if entry["accepted"]:
            runs = blocks[entry["shape"]]
            ms = _attention_ms(entry["dims"], entry["chunks"], result["fidelity"], runs)
            tasks = tasks_per_core(entry["dims"], chunks[0], x * y)
            cell: list[object] = ["yes", _kib(entry["peak_cb"]), f"{ms:.2f}", f"{tasks:.2f}"]
        else:
            cell = [short_reason(entry["error"]), "", "", ""]
        cells.setdefault(chunks, {})[entry["shape"]] = cell
    headers = ["q", "k"]
    for shape in ("windowed", "global"):
        headers += [f"{shape}: accepted", "CBs KiB", f"model ms x{blocks[shape]}", "tasks/core"]
    rows = []
    for chunks, by_shape in sorted(cells.items()):
        row: list[object] = list(chunks)
        for shape in ("windowed", "global"):
            row += by_shape.get(shape, ["(does not divide)", "", "", ""])
        rows.append(row)
    report.table(headers, rows)


def print_cost_model(result: dict[str, Any]) -> None:
    x, y = result["grid"]
    costs = trace_cost.price_all(result["ops"])
    stages = trace_cost.by_stage(costs)
    report.title(
        f"image trace cost model: roofline per op at p150a peaks ({trace_cost.PEAK_CORES} cores: "
        f"{trace_cost.PEAK_TFLOPS['LOFI']:.0f} TFLOP/s LoFi, {trace_cost.PEAK_TFLOPS['HIFI2']:.0f} HiFi2, "
        f"{trace_cost.PEAK_TFLOPS['HIFI4']:.0f} HiFi4; DRAM {trace_cost.DRAM_GBPS:.0f} GB/s)"
    )
    rows = [
        [
            s.label,
            s.blocks or "",
            s.ops,
            f"{s.flops / 1e9:,.0f}",
            f"{s.dram_bytes / 1e6:,.0f}",
            f"{s.compute_s * 1e3:.2f}",
            f"{s.memory_s * 1e3:.2f}",
            f"{s.seconds * 1e3:.2f}",
        ]
        for s in stages
    ]
    total = sum(c.seconds for c in costs)
    flops = sum(c.flops for c in costs)
    rows.append(
        [
            "frame (image trace)",
            "",
            len(costs),
            f"{flops / 1e9:,.0f}",
            f"{sum(c.dram_bytes for c in costs) / 1e6:,.0f}",
            f"{sum(c.compute_s for c in costs) * 1e3:.2f}",
            f"{sum(c.memory_s for c in costs) * 1e3:.2f}",
            f"{total * 1e3:.2f}",
        ]
    )
    report.table(
        ["stage", "blocks", "ops", "GFLOP", "DRAM MB", "compute ms", "memory ms", "roofline ms"], rows
    )
    vit_flops = sum(c.flops for c in costs if c.stage in ("patch_embed", "vit_block"))
    floor = vit_flops / (trace_cost.PEAK_TFLOPS["HIFI2"] * 1e12)
    grid_cores = x * y
    on_grid = sum(c.seconds for c in trace_cost.price_all(result["ops"], cores=grid_cores))
    print(
        f"predicted image trace: {total * 1e3:.1f} ms at {trace_cost.PEAK_CORES} cores, "
        f"{on_grid * 1e3:.1f} ms on the {x}x{y} grid the mock opened ({grid_cores} cores)"
    )
    print(
        f"physical floor: ViT {vit_flops / 1e12:.2f} TFLOP at HiFi2 = {floor * 1e3:.1f} ms "
        f"(docs/design/facts.md: ~{trace_cost.VIT_FLOOR_MS:.0f} ms); "
        f"goal {trace_cost.GOAL_MS:.0f} ms for the frame; "
        f"predicted / goal = {total * 1e3 / trace_cost.GOAL_MS:.2f}"
    )
    per_block = trace_cost.ops_per_block(result["ops"])
    print(
        "ops per ViT block: "
        + ", ".join(
            f"{kind} {'/'.join(str(n) for n in sorted(ns))}" for kind, ns in sorted(per_block.items())
        )
    )
    report.title("ops that take the most modelled time (same op, same shapes, same stage)")
    report.table(
        ["stage", "op (input shapes)", "fidelity", "bound", "runs", "ms", "of frame"],
        [
            [
                g.stage,
                g.signature,
                g.fidelity or "",
                g.bound,
                g.count,
                f"{g.seconds * 1e3:.2f}",
                f"{g.seconds / total:.0%}",
            ]
            for g in trace_cost.dominant(costs)
        ],
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def prompt_trace_rows(logs: dict[int, list[dict[str, Any]]]) -> tuple[list, dict[int, dict[str, float]]]:
    """Per-stage rows (label, blocks, ops, ms per prompt count) and per-count totals: "trace" (the
    replay) and "read" (the mask read after it)."""
    stages: dict[str, list[object]] = {}
    totals: dict[int, dict[str, float]] = {}
    for prompts, ops in logs.items():
        costs = trace_cost.price_all(ops)
        for stage in trace_cost.by_stage(costs):
            row = stages.setdefault(stage.label, [stage.label, stage.blocks or "", stage.ops])
            row.append(_ms(stage.seconds))
        read = sum(c.seconds for c in costs if c.stage == prompt_trace.MASK_READ)
        totals[prompts] = {"trace": sum(c.seconds for c in costs) - read, "read": read}
    return list(stages.values()), totals


def print_two_traces(image_ops: list[dict[str, Any]], quick: bool) -> dict[int, list[dict[str, Any]]]:
    """The prompt trace's cost model per stage, then both traces per frame against the goals;
    returns the prompt traces' op logs by prompt count."""
    size = "tiny" if quick else "full"
    counts = prompt_trace.PROMPT_COUNTS
    report.progress(f"prompt trace ({size}) through the emulator, shapes only: {counts} prompts")
    logs, shapes = prompt_trace.record(size)
    report.title(
        f"prompt trace cost model ({size}: {shapes.encoder_layers} fusion-encoder and "
        f"{shapes.decoder_layers} decoder layers, {shapes.queries} queries, {shapes.image_tokens} image "
        f"tokens), roofline ms at {trace_cost.PEAK_CORES} cores, P prompts in one replay"
    )
    rows, totals = prompt_trace_rows(logs)
    first = logs[counts[0]]
    replay_ops = sum(1 for op in first if op["stage"] != prompt_trace.MASK_READ)
    rows.append(["prompt trace (replay)", "", replay_ops, *(_ms(totals[p]["trace"]) for p in counts)])
    report.table(["stage", "blocks", "ops", *(f"P={p} ms" for p in counts)], rows)
    print(
        "the sequence ChipPromptPath replays (benchmarks/blackhole/prompt_trace.py), ops at P=1 "
        "(each stage issues as many for every P); the top-k keeps k = "
        f"{prompt_trace.kept(shapes)} queries per prompt (the engine's default); the mask read runs after "
        "the replay, outside the trace, on those k rows; nothing of the prompt path is left unported"
    )
    image = sum(c.seconds for c in trace_cost.price_all(image_ops))
    one = totals[counts[0]]["trace"] + totals[counts[0]]["read"]
    upload = trace_cost.upload_seconds()
    report.title(
        "per frame: upload + image trace + prompt trace + mask read (device time, roofline, 120 cores), "
        "one frame at a time and pipelined on two command queues"
    )
    frame_rows = []
    for prompts in counts:
        total = totals[prompts]
        device = image + total["trace"] + total["read"]
        extra = (total["trace"] + total["read"] - one) / (prompts - 1) if prompts > 1 else None
        frame_rows.append(
            [
                prompts,
                f"{upload * 1e3:.3f}",
                _ms(image),
                _ms(total["trace"]),
                _ms(total["read"]),
                f"{trace_cost.stream_frame_seconds(upload, device, pipelined=False) * 1e3:.3f}",
                f"{trace_cost.stream_frame_seconds(upload, device, pipelined=True) * 1e3:.3f}",
                _ms(extra) if extra is not None else "",
            ]
        )
    report.table(
        [
            "prompts",
            "upload ms",
            "image trace ms",
            "prompt trace ms",
            "mask read ms",
            "frame ms, sequential",
            "frame ms, pipelined",
            "per extra prompt ms",
        ],
        frame_rows,
    )
    extra_ms = max((sum(totals[p].values()) - one) / (p - 1) for p in counts if p > 1) * 1e3
    frame_ms = (image + one) * 1e3
    goals = trace_cost
    print(
        f"goals: image trace <= {goals.GOAL_MS:.0f} ms (predicted {image * 1e3:.1f}, "
        f"{image * 1e3 / goals.GOAL_MS:.2f}x); <= {goals.EXTRA_PROMPT_GOAL_MS:.0f} ms per extra prompt "
        f"(predicted up to {extra_ms:.1f}, {extra_ms / goals.EXTRA_PROMPT_GOAL_MS:.1f}x); "
        f"<= {goals.FRAME_TO_MASK_GOAL_MS:.0f} ms frame to mask (device alone, 1 prompt: "
        f"{frame_ms:.1f}, {frame_ms / goals.FRAME_TO_MASK_GOAL_MS:.2f}x)"
    )
    print(
        f"upload = one resized uint8 frame ({trace_cost.FRAME_UPLOAD_BYTES:,} B) at the PCIe 5.0 x16 "
        f"link rate ({trace_cost.PCIE_GBPS:.1f} GB/s: a floor on the time, the driver's rate needs a chip); "
        "sequential = "
        "upload + traces + mask read back to back at their roofline (no dispatch cost); pipelined = "
        "max(upload, traces + mask read): frame N+1 goes up on queue 1 during frame N's device work "
        "(Sam3Segmenter.segment_stream); the host work per frame (first table), the score readback and "
        "the host's pick of the kept rows come on top of both"
    )
    return logs


def main(quick: bool) -> None:
    blackhole_host.print_host_table(quick)
    calibration_report.print_facts()
    calibration_report.print_validation()
    sys.path.insert(0, str(REPO / "tools"))
    from ttnn_mock import manifest

    size = "tiny" if quick else "full"
    grids = dict(list(GRIDS.items())[:1]) if quick else GRIDS
    report.title(f"Blackhole image path on a mock p150a: {size} architecture")
    if not TTNN_PYTHON.exists():
        print("not run: no ttnn in this environment (the ubuntu24.04 row has it)")
        return
    with tempfile.TemporaryDirectory(prefix="blackhole-bench-") as scratch:
        folder = Path(scratch)
        manifest_path = manifest.write(size, folder / "manifest.json")
        results = {
            name: _mock_run(manifest_path, mask, folder / f"{mask}.json") for name, mask in grids.items()
        }
        per_op: dict[str, Any] = {}
        attention: dict[str, Any] = {}
        if "unavailable" not in next(iter(results.values())):
            first_mask = next(iter(grids.values()))
            per_op = _mock_run(manifest_path, first_mask, folder / "per-op.json", per_op=True)
            if not quick:
                attention = _attention_run(first_mask, folder / "attention.json")
    first = next(iter(results.values()))
    if "unavailable" in first:
        print(f"not run: {first['unavailable']}")
        return
    print(
        f"settings: real ttnn {first['ttnn_version']} on a mock p150a, "
        f"{first['dispatch']} dispatch, the engine's device settings; weights as the engine uploads "
        "them (zeros: nothing computes); one forward per table, NO_DISPATCH graph capture per stage or op"
    )
    for name, result in results.items():
        print_peaks(name, result)
    print_largest_ops(per_op)
    print_cost_model(first)
    logs = print_two_traces(first["ops"], quick)
    grid = first["grid"][0] * first["grid"][1]
    image_s = calibration_report.print_image_trace(first["ops"], grid)
    calibration_report.print_frames(image_s, logs, grid)
    if attention:
        print_attention_chunks(attention, blocks_of_each_kind(first["ops"]))
