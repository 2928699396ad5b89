"""Which fused-attention chunk sizes the real ttnn 0.81.1 library accepts at SAM 3's shapes, and their L1.

Runs inside .venv-ttnn on a mock p150a (toolchain.py), with the engine's own device settings
(its compute grid, and the compute kernel config and exp mode it gives the ViT's attention).
For each attention shape of the image path (a windowed block: 9 windows x 16 heads x 576 tokens;
a global block: 16 heads x 5184 tokens; head dim 64) and each (q, k) chunk pair that divides the
sequence (equal chunks, and unequal pairs of the sizes in Q_CHUNKS x K_CHUNKS), it
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
Q_CHUNKS = (64, 96, 192, 288, 576, 864)
K_CHUNKS = (64, 96, 192, 288, 576)


def pairs(sequence: int) -> list[tuple[int, int]]:
    """The (q, k) chunk pairs tried at a sequence length: equal ones, then unequal ones."""
    equal = [(c, c) for c in CHUNKS if sequence % c == 0]
    unequal = [(q, k) for q in Q_CHUNKS for k in K_CHUNKS if q != k and not sequence % q and not sequence % k]
    return equal + unequal


def one_call(ttnn: Any, device: Any, settings: Any, shape: tuple, chunks: tuple[int, int]) -> None:
    _, batch, heads, sequence, dim = shape
    spec = ttnn.Shape([batch, heads, sequence, dim])
    q, k, v = (
        ttnn.allocate_tensor_on_device(spec, ttnn.bfloat16, ttnn.TILE_LAYOUT, device, ttnn.DRAM_MEMORY_CONFIG)
        for _ in range(3)
    )
    try:
        program = ttnn.SDPAProgramConfig(
            compute_with_storage_grid_size=ttnn.CoreCoord(*settings.grid),
            q_chunk_size=chunks[0],
            k_chunk_size=chunks[1],
            exp_approx_mode=settings.vit_exp_approx,
        )
        out = ttnn.transformer.scaled_dot_product_attention(
            q,
            k,
            v,
            is_causal=False,
            scale=dim**-0.5,
            program_config=program,
            compute_kernel_config=settings.vit_attention_kernel,
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
        for chunks in pairs(shape[3]):
            row: dict[str, Any] = {"shape": shape[0], "dims": list(shape[1:]), "chunks": list(chunks)}
            graph.begin_graph_capture(graph.RunMode.NO_DISPATCH)
            try:
                one_call(ttnn, device, settings, shape, chunks)
            except Exception as error:
                row["no_dispatch_error"] = reason(error)
            finally:
                usage = graph.extract_resource_usage_per_core(graph.end_graph_capture())
            row["peak_total"] = int(usage.peak_total)
            row["peak_cb"] = int(usage.peak_cb)
            try:
                one_call(ttnn, device, settings, shape, chunks)
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
                    engine_chunks=list(settings.vit_attention_chunks),
                    exp_approx=settings.vit_exp_approx,
                    fidelity=str(settings.vit_attention_kernel.math_fidelity).rsplit(".", 1)[-1].upper(),
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
