"""tt-metal's measured Blackhole workloads as op lists, to check the calibrated model against.

Each workload is the op sequence its tt-metal model code issues, written from that code's
structure (benchmarks/blackhole/calibration.py names the files), in the op-log format of
tools/ttnn_mock/oplog.py, with the grid each op runs on where the code sets one (`cores`):
- the high-resolution ViT encoder (HIRES_VIT_MODEL): 12 layers at batch 1; per layer two sharded
  layer norms, four linears with program configs (bias and GELU fused), the QKV split into
  DRAM heads, SDPA on a 12x10 grid at q = k = 256 with HiFi4, exact exp and fp32 accumulation,
  the head concatenation, reshards and two residual adds; matmuls on 8x8 cores (hidden <= 1024)
  or 8x12 (wider); measured end to end with trace and two command queues (gaps included);
- ViT-B/16 at batch 10 (VIT_DEVICE_TEST): 224 padded tokens, width 768, 12 heads, on a 12x10
  grid, attention as matmul + softmax + matmul, every activation in L1; measured as the sum of
  the ops' device time (no gaps between them).
The matmuls pass no compute config; the model prices them at LoFi, the fidelity
ttnn's compute-config struct defaults to (an assumption, printed with the table).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import calibrated_cost
from . import calibration as cal

MATMUL_FIDELITY = "LOFI"


def tensor(
    shape: list[int], dtype: str = "BFLOAT8_B", memory: str = "L1", layout: str = "TILE"
) -> dict[str, Any]:
    return {"shape": shape, "dtype": dtype, "layout": layout, "memory": memory}


def op(
    name: str,
    inputs: list[dict[str, Any]],
    outputs: list[dict[str, Any]],
    cores: int,
    fidelity: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    return {
        "op": name,
        "stage": "validation",
        "block": None,
        "windowed": None,
        "inputs": inputs,
        "outputs": outputs,
        "fidelity": fidelity,
        "options": options,
        "cores": cores,
    }


def _linear(
    x: dict[str, Any], k: int, n: int, cores: int, activation: str | None = None, configured: bool = True
) -> dict[str, Any]:
    """A linear with its weight and bias in DRAM; `configured`: it passes a program config."""
    rows = x["shape"][:-1]
    weight = tensor([k, n], memory="DRAM")
    bias = tensor([1, n], memory="DRAM")
    options: dict[str, Any] = {"program_config": True} if configured else {}
    if activation:
        options["fused_activation"] = activation
    return op("linear", [x, weight, bias], [tensor([*rows, n])], cores, MATMUL_FIDELITY, **options)


def hires_vit_layer(sequence: int, hidden: int, heads: int) -> list[dict[str, Any]]:
    """One encoder layer of the high-resolution ViT as its Blackhole code issues it."""
    block = 64 if hidden <= 1024 else 96
    sdpa_cores = 120
    head = hidden // heads
    x = tensor([1, 1, sequence, hidden])
    qkv = tensor([1, 1, sequence, 3 * hidden])
    per_head = tensor([1, heads, sequence, head], memory="DRAM")
    context = tensor([1, heads, sequence, head])
    ops = [
        op("layer_norm", [x], [x], block, "HIFI2"),
        _linear(x, hidden, 3 * hidden, block),
        op("to_memory_config", [qkv], [qkv], block),
        op("experimental.nlp_create_qkv_heads", [qkv], [per_head] * 3, block),
        op("reallocate", [per_head], [per_head], block),
        op(
            "transformer.scaled_dot_product_attention",
            [per_head] * 3,
            [context],
            sdpa_cores,
            "HIFI4",
            q_chunk_size=256,
            k_chunk_size=256,
            **{"compute_kernel_config.fp32_dest_acc_en": True},
        ),
        op("transformer.concatenate_heads", [context], [x], sdpa_cores),
        op("to_memory_config", [x], [tensor(x["shape"], memory="DRAM")], sdpa_cores),
        op("to_memory_config", [tensor(x["shape"], memory="DRAM")], [x], block),
        _linear(x, hidden, hidden, block),
        op("reallocate", [x], [x], block),
        op("add", [x, x], [x], block),
        op("reallocate", [x], [x], block),
        op("layer_norm", [x], [x], block, "HIFI2"),
        _linear(x, hidden, 4 * hidden, block, activation="gelu"),
        _linear(tensor([1, 1, sequence, 4 * hidden]), 4 * hidden, hidden, block),
        op("add", [x, x], [x], block),
    ]
    return ops


def hires_vit(sequence: int, hidden: int, layers: int = 12) -> list[dict[str, Any]]:
    heads = 12 if hidden >= 2048 else 16
    return [o for _ in range(layers) for o in hires_vit_layer(sequence, hidden, heads)]


def vit_b16(
    batch: int = 10, tokens: int = 224, hidden: int = 768, heads: int = 12, layers: int = 12
) -> list[dict[str, Any]]:
    """ViT-B/16 at `batch` images on a 12x10 grid, activations in L1, weights in DRAM."""
    cores = 120
    head = hidden // heads
    x = tensor([batch, 1, tokens, hidden])
    pixels = tensor([batch, 224, 56, 64], dtype="BFLOAT16", layout="ROW_MAJOR")
    patches = tensor([batch * 224, 1024])
    ops = [
        op("fold", [pixels], [tensor([batch * 14 * 16, 1024], "BFLOAT16", "L1", "ROW_MAJOR")], cores),
        op(
            "to_layout",
            [tensor([batch * 224, 1024], "BFLOAT16", "L1", "ROW_MAJOR")],
            [tensor([batch * 224, 1024])],
            cores,
        ),
        _linear(patches, 1024, hidden, cores, configured=False),
        op("to_layout", [x], [tensor(x["shape"], "BFLOAT16", "L1", "ROW_MAJOR")], cores),
        op("concat", [x], [x], cores),
        op("to_layout", [x], [x], cores),
        op("add", [x, x], [x], cores),
    ]
    scores = tensor([batch, heads, tokens, tokens])
    per_head = tensor([batch, heads, tokens, head])
    qkv = tensor([batch, 1, tokens, 3 * hidden])
    for _ in range(layers):
        ops += [
            op("layer_norm", [x], [x], cores, "HIFI2"),
            _linear(x, hidden, 3 * hidden, cores),
            op("reshard", [qkv], [qkv], cores),
            op("transformer.split_query_key_value_and_split_heads", [qkv], [per_head] * 3, cores),
            op("matmul", [per_head, tensor([batch, heads, head, tokens])], [scores], cores, MATMUL_FIDELITY),
            op("mul_", [scores], [scores], cores),
            op("softmax_in_place", [scores], [scores], cores),
            op("matmul", [scores, per_head], [per_head], cores, MATMUL_FIDELITY),
            op("transformer.concatenate_heads", [per_head], [x], cores),
            op("to_memory_config", [x], [tensor(x["shape"], memory="DRAM")], cores),
            op("to_memory_config", [tensor(x["shape"], memory="DRAM")], [x], cores),
            _linear(x, hidden, hidden, cores),
            op("add", [x, x], [x], cores),
            op("layer_norm", [x], [x], cores, "HIFI2"),
            _linear(x, hidden, 4 * hidden, cores, activation="gelu"),
            _linear(tensor([batch, 1, tokens, 4 * hidden]), 4 * hidden, hidden, cores),
            op("add", [x, x], [x], cores),
        ]
    ops += [
        op("layer_norm", [x], [x], cores, "HIFI2"),
        op("reshard", [x], [x], cores),
        _linear(x, hidden, 1152, cores),
    ]
    return ops


@dataclass(frozen=True)
class Workload:
    """A tt-metal measurement and the op list that prices it."""

    name: str
    source: str
    measured_s: float
    measure: str
    ops: Callable[[], list[dict[str, Any]]]
    #: Which model terms apply: a device-kernel-only figure has no gaps between ops.
    terms: frozenset[str] = calibrated_cost.TERMS

    def predicted_s(self, terms: frozenset[str] | None = None) -> float:
        return calibrated_cost.total_seconds(self.ops(), terms=self.terms if terms is None else terms)


def workloads() -> list[Workload]:
    hires = [
        Workload(
            f"high-res ViT, sequence {sequence}, hidden {hidden}, 12 layers, batch 1",
            cal.HIRES_VIT_TEST,
            1.0 / samples,
            f"{samples} samples/s end to end (trace, 2 CQs)",
            lambda s=sequence, h=hidden: hires_vit(s, h),
        )
        for (sequence, hidden), samples in sorted(cal.HIRES_VIT_SAMPLES_PER_S.items(), key=lambda kv: -kv[1])
    ]
    vit_b = Workload(
        "ViT-B/16, batch 10, 224 tokens",
        cal.VIT_DEVICE_TEST,
        10 / cal.VIT_B16_BATCH10_DEVICE_SAMPLES_PER_S.value,
        f"{cal.VIT_B16_BATCH10_DEVICE_SAMPLES_PER_S.value:,.0f} samples/s, device kernel time",
        vit_b16,
        calibrated_cost.TERMS - {"gap"},
    )
    return [*hires, vit_b]
