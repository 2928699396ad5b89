"""`python -m benchmarks --quick` runs every section end to end and prints its tables.

A smoke run on the tiny model (its numbers say nothing about speed): it keeps the benchmark
code working as the package changes. It lives with the integration tests because the
stream section starts the real node in its own process. The model section runs through
tools/gpu_check.sh on the CPU, the very command the GPU check runs on CUDA.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
#: Generous: each run takes about two minutes of CPU; on 2 cores shared with other work the
#: model run took up to 6 minutes of wall time (pytest's own limit is raised to match).
TIMEOUT_S = 480


def _run(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, **env},
    )


@pytest.mark.timeout(TIMEOUT_S + 30)
def test_gpu_check_runs_on_the_cpu(tmp_path: Path) -> None:
    """tools/gpu_check.sh cpu --quick: the CPU table, then every part of the latency check."""
    run = _run(["tools/gpu_check.sh", "cpu", "--quick"], OUT=str(tmp_path), PYTHON=sys.executable)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert "machine: " in out and "torch threads 1" in out
    # the CPU comparison: the reference and both dtypes of ours, with ratios and agreement
    assert "reference (processor + model per prompt)" in out
    assert out.count("ours (Sam3Segmenter, TorchEngine)") == 2
    assert "mask agree (+box)" in out and "prompt path alone" in out
    # the latency check: correctness within bounds, 1/4/16 prompts, documented usage beside ours
    assert "== model correctness: tiny SAM 3 on the device in bf16 vs the CPU in fp32 ==" in out
    assert "mask pixel agreement" in out and "FAILED" not in out
    # one graph: CUDA graphs replay the whole compiled image encoder
    assert "(dynamo explain, tiny model): 1 graph(s), 0 graph break(s)" in out
    stage_rows = [line.split() for line in out.splitlines() if line.startswith("eager ")]
    assert [row[1] for row in stage_rows] == ["1", "4", "16"]
    assert "frame ms (text cached)" in out and "frame ms (text encoded)" in out
    assert "frame ms (20 kept)" in out
    assert "image encoder: 0.00636 TFLOP per image" in out and "achieved TFLOPS by prompt count: 1:" in out
    assert "transformers' documented usage vs ours (eager), float32" in out
    assert "compile_image_encoder is offered on CUDA devices only" in out
    assert "model latency check:" in out
    # the script keeps what it printed in $OUT/gpu_check.txt
    assert "model latency check:" in (tmp_path / "gpu_check.txt").read_text()


@pytest.mark.timeout(TIMEOUT_S + 30)
def test_quick_benchmarks_print_every_other_table() -> None:
    others = [arg for section in SECTIONS if section != "model" for arg in ("--only", section)]
    run = _run([sys.executable, "-m", "benchmarks", "--quick", *others])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert "== model" not in out
    # host: every step, ours vs naive, and the labels check
    for step in (
        "message -> pixels",
        "pre-processing",
        "post-processing",
        "instance mask",
        "total per frame",
        "3D (depth: true): centres and sizes",
        "3D: labelled cloud",
    ):
        assert step in out
    assert "labels from our crops equal the naive full-upsample labels" in out
    assert "3D statistics ours vs exact" in out and "largest gap to the exact statistics" in out
    # stream: the node answered and its ages were measured
    assert "output age p50 / p90 / p99 / max ms" in out
    assert "first vs last quarter" in out
    stream_table = out.split("== stream: frames at")[1].split("age: arrival")[0]
    assert "?" not in stream_table, f"the node's counters never reached the stream table:\n{stream_table}"
    # stream: what the raw image subscriptions save, side by side, and the frames the node took
    assert "deserialising image messages" in out and "ms of executor time per second" in out
    # stream, several cameras: per-camera rates and ages, 1 camera beside 3, and the fairness figure
    assert "== stream: 1 and 3 cameras at 30 Hz each into one node" in out
    assert "fairness (slowest / fastest rate)" in out and "cam2" in out
    # stream, several chips: 8 cameras dealt across 1, 2 and 4 stand-in chips, the goal judged per row
    assert "== stream: 8 cameras at 15 Hz each on 1, 2, 4 chips, stand-in engine" in out
    assert "chip utilisation mean / min" in out and "4 chips: rate Hz / age p50 ms" in out
    # tracking: identities scored against ground truth, ours beside ByteTrack, and the cost per frame
    assert "== tracking: identity, 10% missed detections" in out
    assert "ours (InstanceTracker: masks + motion)" in out
    if importlib.util.find_spec("trackers") is not None:  # the numpy2 row installs it
        assert "ByteTrack (trackers 2.1.0)" in out
    else:
        assert "ByteTrack not run: Roboflow's trackers is not installed" in out
    assert "== tracking: cost per frame at 1920x1080" in out
    # tracking, sam3 mode: SAM 3's tracker beside the image-only path, and its chip trace priced
    assert "== tracking: sam3 mode, cost per frame with the tiny models" in out
    assert "image-only: Sam3Segmenter + InstanceTracker" in out and "sam3: Sam3VideoTracker" in out
    assert "== tracking: sam3 mode on the chip, a tracker trace priced (calibrated cost model)" in out
    assert "per object and frame" in out
    # exemplar: boxes carried to a later frame timed alternately against the same frame without
    assert "== exemplar: cost of exemplar boxes, torch engine" in out
    assert "added (median ratio, alternating)" in out
    assert "== exemplar: chip prompt path, predicted" in out and "scale-1 map read back" in out
    # blackhole: the mock p150a's per-stage peaks and the cost model (or why they did not run)
    assert "ttnn engine: host work per frame" in out and "Blackhole image path on a mock p150a" in out
    assert "not run:" in out or ("per-core peak L1 by stage" in out and "predicted image trace:" in out)
    # blackhole: the prompt trace beside the image trace, and the frame per prompt count
    if "predicted image trace:" in out:
        assert "== prompt trace cost model (tiny:" in out and "mask read (after the replay)" in out
        frame_rows = [line.split() for line in out.split("== per frame:")[1].splitlines()[3:6]]
        assert [row[0] for row in frame_rows] == ["1", "4", "16"]
        assert "goals: image trace <= 40 ms" in out
        # the same traces and the frame under the calibrated model
        assert "== image trace, calibrated (110 cores) beside the roofline" in out
        assert "== prompt traces and the frame, calibrated (110 cores)" in out
    # blackhole: the calibrated model's facts and its validation, whatever the mock did
    assert "== calibration: what tt-metal measures on Blackhole" in out
    validation = out.split("== calibrated model against tt-metal's measured Blackhole workloads")[1]
    assert "high-res ViT, sequence 3072, hidden 2304, 12 layers, batch 1" in validation
    assert "ViT-B/16, batch 10, 224 tokens" in validation


def test_only_runs_the_named_section() -> None:
    run = _run([sys.executable, "-m", "benchmarks", "--quick", "--only", "host"])
    assert run.returncode == 0, run.stderr[-3000:]
    assert "== host:" in run.stdout
    assert "== model:" not in run.stdout and "== stream:" not in run.stdout
    assert "== tracking:" not in run.stdout


def test_a_device_torch_cannot_see_is_refused_before_any_work() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    run = _run([sys.executable, "-m", "benchmarks", "--only", "model", "--device", "cuda"])
    assert run.returncode == 2
    assert "--device cuda" in run.stderr and "no CUDA device" in run.stderr
    assert "== model" not in run.stdout
