"""`python -m benchmarks --quick` runs every section end to end and prints its tables.

A smoke run on the tiny model (its numbers say nothing about speed): it keeps the benchmark
code working as the package changes. It lives with the integration tests because the
stream section starts the real node in its own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Generous: the run takes well under a minute on an idle 2-core machine, longer when shared.
TIMEOUT_S = 240


def test_quick_benchmarks_print_every_table() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=dict(os.environ),
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert "machine: " in out and "torch threads 1" in out
    # model: the reference and both dtypes of ours, with ratios and agreement
    assert "reference (processor + model per prompt)" in out
    assert out.count("ours (Sam3Segmenter, TorchEngine)") == 2
    assert "mask agree (+box)" in out and "prompt path alone" in out
    # host: every step, ours vs naive, and the labels check
    for step in (
        "message -> pixels",
        "pre-processing",
        "post-processing",
        "instance mask",
        "total per frame",
    ):
        assert step in out
    assert "labels from our crops equal the naive full-upsample labels" in out
    # stream: the node answered and its ages were measured
    assert "output age p50 / p90 / p99 / max ms" in out
    assert "first vs last quarter" in out


def test_only_runs_the_named_section() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "host"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=dict(os.environ),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "== host:" in run.stdout
    assert "== model:" not in run.stdout and "== stream:" not in run.stdout
