"""What tt-metal has measured on Blackhole, as data the calibrated cost model and the docs read.

Every figure below is read from a file or an issue of tenstorrent/tt-metal (the `source` of its
entry names it: a path in that repository or an issue number); a few are derived from those
figures by the arithmetic their `note` states. Nothing here was measured on a chip by this
project. benchmarks/blackhole/calibrated_cost.py turns them into per-op times; `python -m benchmarks
--only blackhole` prints this table (print_facts) beside the predictions.
"""

from __future__ import annotations

from dataclasses import dataclass

TT_METAL = "tenstorrent/tt-metal"
GEMM_REPORT = "tech_reports/GEMM_FLOPS/GEMM_FLOPS.md"
HIRES_VIT_TEST = "models/demos/blackhole/vit/tests/test_demo_vit_hiRes_ttnn_inference_perf_e2e_2cq_trace.py"
HIRES_VIT_MODEL = "models/demos/blackhole/vit/tt/ttnn_optimized_sharded_vit_hiRes_bh.py"
VIT_DEVICE_TEST = "models/demos/blackhole/vit/tests/test_vit_device_perf.py"


@dataclass(frozen=True)
class Fact:
    """One published figure: what it is, its value and unit, and where it was read."""

    name: str
    value: float
    unit: str
    source: str
    note: str = ""


#: Clock and per-core matrix peak at HiFi2 (LoFi is twice, HiFi4 half: 1, 2, 4 passes).
CLOCK_HZ = Fact("Tensix clock", 1.35e9, "Hz", GEMM_REPORT, "matrix engine section: 1.35 GHz on BH")
CORE_TFLOPS_LOFI = Fact(
    "matrix peak per core, LoFi",
    5.4,
    "TFLOP/s",
    GEMM_REPORT,
    "8x16 x 16x16 per cycle = 4096 FLOP/cycle at 1.35 GHz; divided by the fidelity passes",
)
DEFAULT_GRID = Fact(
    "default compute grid, worker dispatch",
    110,
    "cores",
    "tt-metal issue 47014 (PRs 47015, 35056)",
    "120 Tensix enabled by p150 firmware >= 19.5; worker dispatch takes a column: 11x10",
)
#: Out-of-box matmul on the 11x10 grid, traced, in DRAM: (M, K, N, device-based utilization).
#: Source: GEMM_REPORT, table "P150 Out of Box Results (11x10 grid)", Use Trace True; bf16 at
#: HiFi2 (priced for every fidelity but LoFi) and bfloat8_b at LoFi.
MATMUL_11X10_LOFI = (
    (640, 704, 704, 0.1016),
    (640, 1408, 1408, 0.2475),
    (640, 1408, 2816, 0.3284),
    (1280, 1408, 1408, 0.4330),
    (1280, 1408, 2816, 0.6090),
    (1280, 2816, 2816, 0.7248),
    (2560, 2816, 2816, 0.8057),
    (2560, 2816, 4224, 0.8230),
    (2560, 4224, 4224, 0.8439),
    (3840, 4224, 4224, 0.8582),
    (3840, 4224, 5632, 0.8654),
    (3840, 5632, 5632, 0.8060),
    (5120, 5632, 5632, 0.8074),
)
MATMUL_11X10 = (
    (640, 704, 704, 0.1849),
    (640, 1408, 1408, 0.4164),
    (640, 1408, 2816, 0.5134),
    (1280, 1408, 1408, 0.6135),
    (1280, 1408, 2816, 0.7597),
    (1280, 2816, 2816, 0.8038),
    (2560, 2816, 2816, 0.8506),
    (2560, 2816, 4224, 0.8613),
    (2560, 4224, 4224, 0.8703),
    (3840, 4224, 4224, 0.8038),
    (3840, 4224, 5632, 0.8063),
    (3840, 5632, 5632, 0.8027),
    (5120, 5632, 5632, 0.8052),
)
OP_GAP_S = Fact(
    "gap between traced ops",
    4.4e-6,
    "s",
    GEMM_REPORT + " (11x10 out-of-box table, 640x704x704, traced)",
    "host-timed 15,704.63 ns at 13.28 % host-based against 18.49 % device-based utilization: "
    "device time 11,280 ns, the 4.4 us between them is what the trace pays around the op",
)
KERNEL_FIXED_CYCLES = Fact(
    "launch, start and tail inside an op's device time",
    2900,
    "cycles",
    "tt-metal issue 55766",
    "SDPA walls on a p100a: about 2,900 cycles of launch, tail and start; priced for every op",
)
SFPU_CYCLES_PER_TILE = Fact(
    "SFPU work per 32x32 tile (exact exp)",
    102,
    "cycles",
    "tt-metal issue 55759",
    "257,743 SFPU cycles per core at the llama 3.1 8B SDPA point on 110 cores (causal, S4096, "
    "q = k = 256: 136 chunk pairs of 64 score tiles for each of 32 heads, 2,532 tiles per core); "
    "priced once per output tile of every elementwise, normalization and softmax op",
)
MATMUL_DEFAULT_FIDELITY = Fact(
    "ttnn.linear / matmul fidelity without a compute config",
    1,
    "LoFi passes",
    "ttnn 0.81.1 wheel on a mock p150a (graph capture of ttnn.linear)",
    "ComputeKernelConfig(math_fidelity=LoFi, fp32_dest_acc_en=0, packer_l1_acc=1)",
)
#: Non-causal SDPA math busy by (q chunk, k chunk), streaming kernel, HiFi2, 110 cores
#: (tt-metal issue 55758), and the one point whose wall is published with it.
SDPA_MATH_BUSY = {(64, 128): 0.37, (128, 128): 0.60, (256, 128): 0.63, (512, 128): 0.63, (512, 512): 0.78}
SDPA_BEST_BUSY = Fact(
    "SDPA math busy, q256 k256, fp32 accumulation off",
    0.81,
    "fraction",
    "tt-metal issue 55758",
    "the best point measured (HiFi4, exact exp, 64 cores, streaming kernel)",
)
SDPA_ANCHOR_WALL_S = Fact(
    "SDPA wall, non-causal S4096 32q/8kv heads d128 bfp8 HiFi2 q128 k128, 110 cores",
    2.100e-3,
    "s",
    "tt-metal issue 55758 (timing ablations, main build)",
    "its FLOPs (4*32*4096^2*128) at the 110-core HiFi2 peak take 0.90 ms: 43 % of the wall, "
    "against 60 % math busy at the same point; the model scales every math-busy figure by that ratio",
)
SDPA_INNER_CYCLES = {"cross": 3090, "non-causal": 3680, "causal": 10560, "windowed": 11380, "masked": 18140}
SDPA_REGIME_SOURCE = "tt-metal issue 55756 (cycles per inner iteration by regime, p100a)"
SDPA_FP32_ACC_FACTOR = Fact(
    "SDPA with fp32_dest_acc_en (non-streaming kernel) over the streaming kernel",
    1.24,
    "x time",
    "tt-metal issue 56693",
    "fp32_dest_acc_en selects the non-streaming kernel: 24 % slower at the llama 3.1 8B prefill point",
)
#: DRAM read efficiency by page size (bytes per NoC read request) on Blackhole: a DRAM endpoint
#: takes one request per ~16.4 cycles per NoC (tt-metal issue 55898): 64 B rows (a 32-wide
#: ROW_MAJOR bf16 tensor) 9 %, a bfp4 tile (576 B) 62 %, a bfp8 tile (1088 B) 91 %, a bf16 tile 98 %.
DRAM_PAGE_EFFICIENCY = ((64, 0.09), (576, 0.62), (1088, 0.91), (2048, 0.98))
DRAM_GBPS = Fact("GDDR6 bandwidth", 512.0, "GB/s", "p150a specification (Tenstorrent)")
FP32_MATMUL_NOTE = (
    "fp32_dest_acc_en halves the matmul destination register (8 tiles to 4: tech_reports/matrix_engine); "
    "no Blackhole matmul timing with and without it is published, so the model does not price it "
    "for matmuls"
)
HIDDEN_OPS_NOTE = (
    "ttnn.linear without a program config runs activation= as a separate unary op, and with an L1 "
    "output its bias as a separate op (ttnn/cpp/ttnn/operations/matmul/matmul.cpp): priced as one "
    "more op over the output each"
)

#: tt-metal's measured Blackhole workloads the model is validated on.
HIRES_VIT_SAMPLES_PER_S = {  # (sequence, hidden): samples/s, batch 1, 12 layers, trace + 2 CQs
    (1024, 1024): 242,
    (3072, 1024): 69,
    (3072, 2304): 31,
}
VIT_B16_BATCH10_DEVICE_SAMPLES_PER_S = Fact(
    "ViT-B/16 batch 10, device kernel samples/s",
    4300,
    "samples/s",
    VIT_DEVICE_TEST,
    "AVG DEVICE KERNEL SAMPLES/S: the sum of the ops' device times, no gaps between them",
)
VALIDATION_BAND = 0.25


def facts() -> list[Fact]:
    """Every scalar fact, in the order the bench prints them."""
    return [
        CLOCK_HZ,
        CORE_TFLOPS_LOFI,
        DEFAULT_GRID,
        OP_GAP_S,
        KERNEL_FIXED_CYCLES,
        SFPU_CYCLES_PER_TILE,
        MATMUL_DEFAULT_FIDELITY,
        SDPA_BEST_BUSY,
        SDPA_ANCHOR_WALL_S,
        SDPA_FP32_ACC_FACTOR,
        DRAM_GBPS,
        VIT_B16_BATCH10_DEVICE_SAMPLES_PER_S,
    ]
