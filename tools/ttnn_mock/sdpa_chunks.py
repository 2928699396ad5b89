"""Which fused-attention chunk sizes the real ttnn 0.81.1 library accepts at SAM 3's shapes, and their L1.

Runs inside .venv-ttnn on a mock p150a (toolchain.py), with the engine's own device settings
(its compute grid and the compute kernel config it gives the attention). For each attention
shape of the image path (a windowed block: 9 windows x 16 heads x 576 tokens; a global block:
16 heads x 5184 tokens; head dim 64) and each q/k chunk size that divides the sequence, it
runs ttnn.transformer.scaled_dot_product_attention once under a NO_DISPATCH graph capture (the
per-core peak of its circular buffers) and once in normal mode (whether program creation
accepts it: circular buffers beyond L1 raise there). Nothing computes.

Usage: .venv-ttnn/bin/python tools/ttnn_mock/sdpa_chunks.py --json OUT.json [--harvest 3]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tools")]

from ttnn_mock import toolchain  # noqa: E402 - after the path set-up above
from ttnn_mock.image_path import without_torch  # noqa: E402

#: (label, batch, heads, sequence, head dim) of SAM 3's two attention shapes.
SHAPES = (("windowed", 9, 16, 576, 64), ("global", 1, 16, 5184, 64))
CHUNKS = (32, 64, 96, 128, 144, 192, 288, 576, 1024)


def one_call(ttnn: Any, device: Any, settings: Any, shape: tuple, chunk: int) -> None:
    _, batch, heads, sequence, dim = shape
    spec = ttnn.Shape([batch, heads, sequence, dim])
    q, k, v = (
        ttnn.allocate_tensor_on_device(spec, ttnn.bfloat16, ttnn.TILE_LAYOUT, device, ttnn.DRAM_MEMORY_CONFIG)
        for _ in range(3)
    )
    try:
        program = ttnn.SDPAProgramConfig(
            compute_with_storage_grid_size=ttnn.CoreCoord(*settings.grid),
            q_chunk_size=chunk,
            k_chunk_size=chunk,
            exp_approx_mode=False,
        )
        out = ttnn.transformer.scaled_dot_product_attention(
            q,
            k,
            v,
            is_causal=False,
            scale=dim**-0.5,
            program_config=program,
            compute_kernel_config=settings.exact_kernel,
            memory_config=settings.memory,
        )
        ttnn.deallocate(out)
    finally:
        for tensor in (q, k, v):
            ttnn.deallocate(tensor)


def reason(error: Exception) -> str:
    """The informative line of a tt-metal error (its first line is often just the location)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if any(word in line for word in ("beyond", "Out of Memory", "clash", "must be", "TT_FATAL")):
            return line[:300]
    return (lines[0] if lines else type(error).__name__)[:300]


def measure(ttnn: Any, device: Any, settings: Any) -> list[dict[str, Any]]:
    graph = ttnn._ttnn.graph
    rows = []
    for shape in SHAPES:
        for chunk in CHUNKS:
            if shape[3] % chunk:
                continue
            row: dict[str, Any] = {"shape": shape[0], "dims": list(shape[1:]), "chunk": chunk}
            graph.begin_graph_capture(graph.RunMode.NO_DISPATCH)
            try:
                one_call(ttnn, device, settings, shape, chunk)
            except Exception as error:
                row["no_dispatch_error"] = reason(error)
            finally:
                usage = graph.extract_resource_usage_per_core(graph.end_graph_capture())
            row["peak_total"] = int(usage.peak_total)
            row["peak_cb"] = int(usage.peak_cb)
            try:
                one_call(ttnn, device, settings, shape, chunk)
                row["accepted"] = True
            except Exception as error:
                row["accepted"] = False
                row["error"] = reason(error)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harvest", type=int, default=toolchain.HARVEST_MASKS["harvested"])
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    out = args.json.resolve()
    result: dict[str, Any] = {"harvest_mask": args.harvest, "ok": False}
    try:
        with tempfile.TemporaryDirectory(prefix="ttnn-mock-") as scratch:
            os.environ.update(toolchain.build(Path(scratch), args.harvest))
            os.chdir(scratch)
            import ttnn

            with without_torch():
                from tt_sam3_ros.engines import ttnn_engine
                from tt_sam3_ros.engines.ttnn_model.config import device_settings

            device, dispatch = ttnn_engine.open_blackhole(
                ttnn, 0, ttnn_engine.DEFAULT_L1_SMALL, ttnn_engine.DEFAULT_TRACE_REGION
            )
            try:
                settings = device_settings(ttnn, device)
                result.update(
                    ttnn_version=importlib.metadata.version("ttnn"),
                    dispatch=dispatch,
                    grid=list(settings.grid),
                    engine_chunk=settings.attention_chunk,
                    fidelity=str(settings.exact_kernel.math_fidelity).rsplit(".", 1)[-1].upper(),
                    rows=measure(ttnn, device, settings),
                    ok=True,
                )
            finally:
                ttnn.close_device(device)
    except toolchain.MockUnavailableError as error:
        result["unavailable"] = str(error)
    out.write_text(json.dumps(result))
    return 0 if result["ok"] or "unavailable" in result else 1


if __name__ == "__main__":
    sys.exit(main())
