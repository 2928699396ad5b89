"""A roofline cost model of the two traces: each op's FLOPs, DRAM bytes and time at p150a peaks.

Input: the op log of one image-path forward, or of one prompt-trace replay
(benchmarks/blackhole/prompt_trace.py), as tools/ttnn_mock/oplog.py records it (the engine's ttnn
calls with their tensors' shapes, dtypes, layouts, fidelity and stage), from the real library on a
mock p150a or from the emulator. Nothing here runs an op.

Per op: time = max(FLOPs / matrix peak at its fidelity, DRAM bytes / DRAM bandwidth). The
peaks are the p150a figures of docs/design/facts.md for 120 cores; `cores` scales the matrix peak to the grid
the device opened. What the model assumes, so its numbers are read for what they are:
- matrix FLOPs are counted on tile-padded shapes: linear/matmul 2*M*K*N per batch (with
  transpose_a/transpose_b read from the call), fused
  attention 4*B*H*Sq*Sk*D (QK^T and PV), conv2d 2*H*W*Cout*Cin*kh*kw; every other op is
  data movement or SFPU work and is priced by its DRAM traffic only (SFPU throughput, e.g. the
  exp of softmax and attention or the gelu, is not modelled);
- DRAM bytes: every DRAM input read once and every DRAM output written once, bfloat8_b at
  1088 B per 1024 values (shared exponents); a tensor in L1 moves no DRAM bytes (its traffic
  stays on the cores and the NoC, which the model does not price: a floor); special cases:
  a reshape that can be a view (last dimension unchanged, rows tile-aligned) moves nothing;
  the fused attention re-reads K and V once per query chunk (ceil(Sq / q_chunk) times), and its
  mask's slice once per (batch, head) it computes, so a mask broadcast over heads (the prompt
  path's key masks, (B, 1, Sq, Sk)) is read once per head: both as tt-metal's SDPA reader
  (sdpa/device/kernels/dataflow/reader_interleaved.cpp) loops, K, V and mask chunks inside
  its loops over batch, head and q chunk;
  the fused rotary embedding reads each input tile twice (as itself and as its rotated
  partner) and the cos and sin tables once per leading index (batch x heads), as its reader
  kernel does;
- ops do not overlap, and an op reaches its roofline (no dispatch, no launch cost): a floor
  for the code as written, not a prediction of a chip's latency.

A frame of a stream also uploads its pixels (the resized uint8 square, TtnnEngine._host_input),
priced at the PCIe link rate (a ceiling on the driver's transfer, which only a chip can show).
One frame at a time, the upload comes before the traces (sequential: the sum); with two command
queues and Sam3Segmenter.segment_stream, frame N+1's upload runs on queue 1 during frame N's
traces and mask read (pipelined: the longer of the two), stream_frame_seconds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tt_sam3_ros.engines.base import MODEL_SIDE

#: p150a matrix peak at 120 Tensix cores, TFLOP/s, by math fidelity (docs/design/facts.md; HiFi3 is
#: LoFi / 3 passes by the same rule: LoFi 1, HiFi2 2, HiFi4 4 passes).
PEAK_TFLOPS = {"LOFI": 664.0, "HIFI2": 332.0, "HIFI3": 221.3, "HIFI4": 166.0}
PEAK_CORES = 120
#: GDDR6 bandwidth, GB/s (docs/design/facts.md, Blackhole p150a).
DRAM_GBPS = 512.0
#: When an op names no compute config: assume the slowest fidelity, and say so.
DEFAULT_FIDELITY = "HIFI4"
#: The physical floor of SAM 3's ViT at HiFi2 and the frame goal (docs/design/facts.md, Blackhole p150a).
VIT_FLOOR_MS = 16.0
GOAL_MS = 40.0
#: Issue 12's goals beside it: each prompt beyond the first, and camera frame to published mask.
EXTRA_PROMPT_GOAL_MS = 3.0
FRAME_TO_MASK_GOAL_MS = 50.0
#: PCIe 5.0 x16 (docs/design/facts.md), one direction: 32 GT/s x 16 lanes x 128/130 line code / 8 bits.
PCIE_GBPS = 32.0 * 16 * 128 / 130 / 8
#: One frame's upload: the resized uint8 RGB square the image trace takes (1008 x 1008 x 3 B).
FRAME_UPLOAD_BYTES = MODEL_SIDE * MODEL_SIDE * 3
TILE = 32
BYTES_PER_VALUE = {
    "BFLOAT16": 2.0,
    "FLOAT32": 4.0,
    "UINT32": 4.0,
    "INT32": 4.0,
    "UINT16": 2.0,
    "UINT8": 1.0,
    "BFLOAT8_B": 1088 / 1024,
    "BFLOAT4_B": 576 / 1024,
}
MATMULS = ("linear", "matmul")
ATTENTION = "transformer.scaled_dot_product_attention"
CONV = "conv2d"
ROTARY = "experimental.rotary_embedding"


@dataclass(frozen=True)
class OpCost:
    """One op priced: FLOPs, DRAM bytes, and the two times whose max is its roofline time."""

    op: str
    stage: str
    block: int | None
    windowed: bool | None
    signature: str
    fidelity: str | None
    flops: float
    dram_bytes: float
    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def stage_label(self) -> str:
        return stage_label(self.stage, self.windowed)


def upload_seconds(nbytes: float = FRAME_UPLOAD_BYTES, gbps: float = PCIE_GBPS) -> float:
    """Host-to-device time of `nbytes` at `gbps` (the link rate by default: a floor)."""
    return nbytes / (gbps * 1e9)


def stream_frame_seconds(upload_s: float, device_s: float, pipelined: bool) -> float:
    """Per-frame time of a stream of frames: the upload, then the device work (traces and mask
    read) when one frame is done at a time; the longer of the two when frame N+1's upload runs
    on the second command queue during frame N's device work."""
    return max(upload_s, device_s) if pipelined else upload_s + device_s


def stage_label(stage: str, windowed: bool | None) -> str:
    if stage == "vit_block":
        return "ViT windowed blocks" if windowed else "ViT global blocks"
    return STAGE_LABELS.get(stage, stage)


STAGE_LABELS = {
    "patch_embed": "patch embedding",
    "neck": "FPN neck",
    "geometry_encoder": "geometry class token",
    "fusion_encoder": "fusion encoder layers",
    "decoder": "decoder layers and glue",
    "scoring": "scoring",
    "segmentation_head": "segmentation head",
    "selection": "on-device selection",
}


def padded(shape: Sequence[int], layout: str) -> list[int]:
    """The shape a TILE tensor occupies: its last two dimensions rounded up to 32."""
    dims = list(shape) or [1]
    if layout == "TILE":
        dims[-1] = math.ceil(dims[-1] / TILE) * TILE
        if len(dims) > 1:
            dims[-2] = math.ceil(dims[-2] / TILE) * TILE
    return dims


def tensor_bytes(tensor: dict[str, Any]) -> float:
    return math.prod(padded(tensor["shape"], tensor["layout"])) * BYTES_PER_VALUE.get(tensor["dtype"], 2.0)


def dram_tensor_bytes(tensor: dict[str, Any]) -> float:
    """What moving `tensor` costs in DRAM traffic: its bytes in DRAM, nothing in L1 or on the host."""
    return tensor_bytes(tensor) if tensor["memory"] == "DRAM" else 0.0


def _device_bytes(tensors: Iterable[dict[str, Any]]) -> float:
    return sum(dram_tensor_bytes(t) for t in tensors)


def reshape_is_view(source: dict[str, Any], target: dict[str, Any]) -> bool:
    """A reshape moves nothing when the last dimension stays and rows stay tile-aligned."""
    a, b = source["shape"], target["shape"]
    if not a or not b or a[-1] != b[-1]:
        return False
    if source["layout"] != "TILE":
        return True
    rows_a = a[-2] if len(a) > 1 else 1
    rows_b = b[-2] if len(b) > 1 else 1
    return rows_a % TILE == 0 and rows_b % TILE == 0


def matrix_flops(op: dict[str, Any]) -> float:
    """Matrix-engine FLOPs of one op (0 for data movement and SFPU work)."""
    name, inputs = op["op"], op["inputs"]
    if name in MATMULS and len(inputs) >= 2:
        a = padded(inputs[0]["shape"], inputs[0]["layout"])
        b = padded(inputs[1]["shape"], inputs[1]["layout"])
        batch = max(math.prod(a[:-2]), math.prod(b[:-2]))
        options = op.get("options", {})
        rows, inner = (a[-1], a[-2]) if options.get("transpose_a") else (a[-2], a[-1])
        columns = b[-2] if options.get("transpose_b") else b[-1]
        return 2.0 * batch * rows * inner * columns
    if name == ATTENTION and len(inputs) >= 2:
        q = padded(inputs[0]["shape"], inputs[0]["layout"])
        k = padded(inputs[1]["shape"], inputs[1]["layout"])
        return 4.0 * math.prod(q[:-2]) * q[-2] * k[-2] * q[-1]
    if name == CONV:
        o = op["options"]
        kh, kw = o.get("kernel_size", [1, 1])
        stride = o.get("stride", [1, 1])
        out_h = math.ceil(o["input_height"] / stride[0])
        out_w = math.ceil(o["input_width"] / stride[1])
        return 2.0 * o.get("batch_size", 1) * out_h * out_w * o["out_channels"] * o["in_channels"] * kh * kw
    return 0.0


def dram_bytes(op: dict[str, Any]) -> float:
    """DRAM traffic of one op under the assumptions in the module docstring."""
    name, inputs, outputs = op["op"], op["inputs"], op["outputs"]
    if name == "reshape" and inputs and outputs and reshape_is_view(inputs[0], outputs[0]):
        return 0.0
    if name == ATTENTION and len(inputs) >= 3:
        q, k, v = inputs[:3]
        chunk = op["options"].get("q_chunk_size") or q["shape"][-2]
        passes = math.ceil(q["shape"][-2] / chunk)
        rereads = passes * (dram_tensor_bytes(k) + dram_tensor_bytes(v))
        masks = sum(_mask_reads(q, mask) for mask in inputs[3:4])
        return dram_tensor_bytes(q) + rereads + masks + _device_bytes(inputs[4:] + outputs)
    if name == ROTARY and len(inputs) >= 3:
        x, cos, sin = inputs[:3]
        sweeps = math.prod(padded(x["shape"], x["layout"])[:-2])
        tables = sweeps * (dram_tensor_bytes(cos) + dram_tensor_bytes(sin))
        return 2 * dram_tensor_bytes(x) + tables + _device_bytes(outputs)
    if name == CONV:
        o = op["options"]
        kh, kw = o.get("kernel_size", [1, 1])
        weight = o["out_channels"] * o["in_channels"] * kh * kw
        weight_bytes = weight * BYTES_PER_VALUE.get(o.get("weights_dtype", "BFLOAT16"), 2.0)
        return _device_bytes(inputs[:1]) + weight_bytes + _device_bytes(outputs[:1])
    return _device_bytes(inputs) + _device_bytes(outputs)


def _mask_reads(q: dict[str, Any], mask: dict[str, Any]) -> float:
    """DRAM bytes the fused attention reads of its additive mask: the mask's slice of every
    (batch, head) it computes, so a mask broadcast over heads or batch is read that many times."""
    batch, heads = q["shape"][0], q["shape"][1]
    mask_batch, mask_heads = mask["shape"][0], mask["shape"][1]
    return dram_tensor_bytes(mask) * (batch * heads) / (mask_batch * mask_heads)


def _signature(op: dict[str, Any]) -> str:
    shapes = " x ".join("x".join(str(d) for d in t["shape"]) for t in op["inputs"][:2])
    return f"{op['op']}({shapes})"


def price(op: dict[str, Any], cores: int = PEAK_CORES) -> OpCost:
    flops = matrix_flops(op)
    fidelity = op.get("fidelity") or (DEFAULT_FIDELITY if flops else None)
    peak = PEAK_TFLOPS[fidelity] * 1e12 * cores / PEAK_CORES if flops else math.inf
    moved = dram_bytes(op)
    return OpCost(
        op["op"],
        op["stage"],
        op.get("block"),
        op.get("windowed"),
        _signature(op),
        fidelity,
        flops,
        moved,
        flops / peak,
        moved / (DRAM_GBPS * 1e9),
    )


def price_all(ops: Iterable[dict[str, Any]], cores: int = PEAK_CORES) -> list[OpCost]:
    return [price(op, cores) for op in ops]


@dataclass
class StageTotal:
    label: str
    ops: int = 0
    blocks: int = 0
    flops: float = 0.0
    dram_bytes: float = 0.0
    compute_s: float = 0.0
    memory_s: float = 0.0
    seconds: float = 0.0


STAGE_ORDER = (
    "patch embedding",
    "ViT windowed blocks",
    "ViT global blocks",
    "FPN neck",
    "geometry class token",
)
#: The prompt trace's stages in replay order, then the mask read after it
#: (benchmarks/blackhole/prompt_trace.py).
PROMPT_STAGE_ORDER = (
    "between modules",
    "fusion encoder layers",
    "decoder layers and glue",
    "scoring",
    "on-device selection",
    "segmentation head",
    "mask read (after the replay)",
)


def by_stage(costs: Iterable[OpCost]) -> list[StageTotal]:
    """Sums per stage, in image-path order (stages outside the path last)."""
    totals: dict[str, StageTotal] = {}
    blocks: dict[str, set[int]] = defaultdict(set)
    for cost in costs:
        total = totals.setdefault(cost.stage_label, StageTotal(cost.stage_label))
        total.ops += 1
        total.flops += cost.flops
        total.dram_bytes += cost.dram_bytes
        total.compute_s += cost.compute_s
        total.memory_s += cost.memory_s
        total.seconds += cost.seconds
        if cost.block is not None:
            blocks[cost.stage_label].add(cost.block)
    for label, seen in blocks.items():
        totals[label].blocks = len(seen)
    order = {label: i for i, label in enumerate(STAGE_ORDER + PROMPT_STAGE_ORDER)}
    return sorted(totals.values(), key=lambda t: order.get(t.label, len(order)))


@dataclass
class OpGroup:
    """The same op on the same shapes in the same stage, however many times it runs."""

    stage: str
    signature: str
    fidelity: str | None
    bound: str
    count: int = 0
    seconds: float = 0.0
    flops: float = 0.0
    dram_bytes: float = 0.0


def dominant(costs: Iterable[OpCost], top: int = 12) -> list[OpGroup]:
    """The op groups that take the most modelled time, largest first."""
    groups: dict[tuple[str, str, str | None], OpGroup] = {}
    for cost in costs:
        key = (cost.stage_label, cost.signature, cost.fidelity)
        group = groups.setdefault(key, OpGroup(cost.stage_label, cost.signature, cost.fidelity, cost.bound))
        group.count += 1
        group.seconds += cost.seconds
        group.flops += cost.flops
        group.dram_bytes += cost.dram_bytes
    return sorted(groups.values(), key=lambda g: g.seconds, reverse=True)[:top]


def ops_per_block(ops: Iterable[dict[str, Any]]) -> dict[str, set[int]]:
    """Distinct op counts of the windowed and of the global ViT blocks (one value each when
    every block of a kind runs the same ops)."""
    counts: dict[int, int] = defaultdict(int)
    kinds: dict[int, str] = {}
    for op in ops:
        if op["stage"] == "vit_block":
            counts[op["block"]] += 1
            kinds[op["block"]] = "windowed" if op["windowed"] else "global"
    per_kind: dict[str, set[int]] = defaultdict(set)
    for block, count in counts.items():
        per_kind[kinds[block]].add(count)
    return dict(per_kind)
