"""Exemplar section: what exemplar boxes cost, per request and per later frame.

Measured, on the torch engine (random weights, the tiny model and, unless --quick, the full-size
one; one prompt; the image encoder runs once per image and is not timed): the geometry encoder
on the frame the boxes were drawn on (``encode_exemplars``, once per request) and the prompt path
of a later frame that carries them (``decode`` with the boxes' tokens in the prompt: our extension
of SAM 3) against the same prompt without them. Medians of the repeats, milliseconds.

Predicted, for the ttnn engine's chip prompt path: the frame the boxes were drawn on reads the
scale-1 FPN map back (ttnn_model/prompt_path.py), priced as DRAM reads at the calibrated cost
model's page efficiency (benchmarks/blackhole/calibrated_cost.py) and the PCIe link rate, the slower of the
two (a floor: the driver's rate needs a chip); the geometry encoder then runs on the host (the
full-size "drawn frame" figure of the measured table, on this machine's CPU). The prompt trace
is the same with boxes as without (64 prompt rows either way), so a later frame carrying them
costs the chip nothing more.
"""

from __future__ import annotations

import statistics
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

from ..blackhole import calibrated_cost, trace_cost
from ..common import report

#: The suite's helpers (random_weights: the full-size model with random weights).
SUPPORT = Path(__file__).resolve().parents[2] / "test" / "support"
BOX_COUNTS = (1, 4, 16)
REPEATS = {"tiny": 20, "full size": 3}
QUICK_REPEATS = 3
#: The scale-1 FPN map the chip prompt path reads back on a frame with boxes: (1, 1, 72 * 72, 256)
#: bfloat16, TILE, DRAM interleaved.
SCALE_1_MAP = {"shape": [1, 1, 72 * 72, 256], "layout": "TILE", "dtype": "BFLOAT16", "memory": "DRAM"}


def _model(size: str):
    """The tiny model or the full-size one, random weights from seed 0 (the full size as the
    suite's full-size tests build it: test/support/random_weights.py)."""
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3

    if size == "tiny":
        return build_tiny_sam3(seed=0)
    if str(SUPPORT) not in sys.path:
        sys.path.insert(0, str(SUPPORT))
    from random_weights import full_size_sam3

    return full_size_sam3(seed=0)


def _boxes(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`count` positive boxes, cx cy w h normalised."""
    centres = rng.uniform(0.3, 0.7, (count, 2))
    boxes = np.concatenate([centres, np.full((count, 2), 0.2)], axis=1).astype(np.float32)
    return boxes, np.ones(count, np.int64)


def measure(size: str, device: str, repeats: int) -> list[list[str]]:
    """Rows: model, boxes, geometry encoder on the drawn frame, later frame with / without them, added.

    The later frame with the boxes and without them alternate call by call, and "added" is the
    median of the per-round ratios: the difference is a few percent of the prompt path, smaller
    than the drift of a shared machine over a run. Times are this process's CPU seconds on one
    torch thread (main sets it), which other processes on the cores move far less than wall time.
    """
    from tt_sam3_ros.engines.torch_engine import TorchEngine
    from tt_sam3_ros.weights.tiny_model import clip_tokenizer

    # CPU seconds of this process on the CPU; wall time where the work runs on a GPU.
    clock = time.process_time if device == "cpu" else time.perf_counter
    report.progress(f"exemplar boxes, {size} model: building it")
    engine = TorchEngine(_model(size), clip_tokenizer(), device=device, dtype="float32")
    rng = np.random.default_rng(0)
    drawn = engine.encode_image(rng.integers(0, 256, (1008, 1008, 3), dtype=np.uint8))
    later = engine.encode_image(rng.integers(0, 256, (1008, 1008, 3), dtype=np.uint8))
    text = engine.encode_prompts(["bolt"])
    rows = []
    for count in BOX_COUNTS:
        report.progress(f"exemplar boxes, {size} model: {count} boxes")
        boxes, labels = _boxes(count, rng)
        encode = report.median_time(
            partial(engine.encode_exemplars, drawn, [boxes], [labels]), repeats, clock=clock
        )
        carried = engine.encode_exemplars(drawn, [boxes], [labels])
        plain, with_boxes = report.alternating_times(
            [partial(engine.decode, later, text), partial(engine.decode, later, text, exemplars=carried)],
            repeats,
            clock=clock,
        )
        added = statistics.median(b / a for a, b in zip(plain, with_boxes, strict=True)) - 1
        later_ms = [report.ms(statistics.median(taken)) for taken in (with_boxes, plain)]
        rows.append([size, count, report.ms(encode), *later_ms, f"{added:+.1%}"])
    engine.close()
    return rows


def read_back_seconds() -> tuple[float, float, float]:
    """(bytes, DRAM read s at the calibrated page efficiency, PCIe s at the link rate) of the map."""
    nbytes = trace_cost.tensor_bytes(SCALE_1_MAP)
    dram = nbytes / (trace_cost.DRAM_GBPS * 1e9 * calibrated_cost.dram_efficiency(SCALE_1_MAP))
    return nbytes, dram, trace_cost.upload_seconds(nbytes)


def main(quick: bool, device: str = "cpu") -> None:
    sizes = ("tiny",) if quick else ("tiny", "full size")
    rows, repeats = [], {size: QUICK_REPEATS if quick else REPEATS[size] for size in sizes}
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)  # one thread's CPU seconds: what other processes move least
    try:
        for size in sizes:
            rows += measure(size, device, repeats[size])
        used = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
    report.title("exemplar: cost of exemplar boxes, torch engine")
    medians = ", ".join(f"{count} repeats ({size})" for size, count in repeats.items())
    clock = "CPU ms of this process" if device == "cpu" else "wall ms"
    print(
        f"torch engine on {device}, random weights, 1 prompt, float32, "
        f"torch threads {used}; median {clock} of {medians}, with and without the boxes alternating"
    )
    report.table(
        [
            "model",
            "boxes",
            "geometry encoder, drawn frame (ms)",
            "later frame with the boxes (ms)",
            "later frame without (ms)",
            "added (median ratio, alternating)",
        ],
        rows,
    )
    nbytes, dram, pcie = read_back_seconds()
    report.title("exemplar: chip prompt path, predicted")
    print(
        "ttnn engine, chip prompt path: the device's part of a frame with boxes beside one without "
        "(calibrated cost model's DRAM page efficiency, PCIe 5.0 x16 link rate: a floor)"
    )
    report.table(
        ["step", "when", "predicted ms"],
        [
            [
                f"scale-1 map read back ({nbytes / 1e6:.2f} MB bfloat16): DRAM read / PCIe",
                "the frame the boxes were drawn on",
                f"{report.ms(dram)} / {report.ms(pcie)}",
            ],
            ["geometry encoder", "the frame the boxes were drawn on", "on the host: the measured table's"],
            ["prompt trace with the boxes' tokens", "every frame that carries them", "+0 (the same trace)"],
        ],
    )
