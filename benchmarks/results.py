"""Benchmark results as data: each section's tables with one metadata record, for the docs.

``python -m benchmarks --only SECTION --results benchmarks/results`` writes
benchmarks/results/<section>.json; tools/gen_docs.py renders the docs' figures from those files
(benchmarks/figures.py), so a figure quoted anywhere has one source.
"""

from __future__ import annotations

import datetime
import json
import subprocess
from pathlib import Path
from typing import Any

from . import report

REPO = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The checkout's short commit, marked when tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} (with local changes)" if dirty else head


def metadata(argv: list[str]) -> dict[str, str]:
    """When, at which commit, on which machine, by which command."""
    machine = report.machine_lines()[0].removeprefix("machine: ")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "commit": commit(),
        "machine": machine,
        "command": " ".join(["python -m benchmarks", *argv]),
    }


def write(folder: str | Path, section: str, tables: list[dict[str, Any]], argv: list[str]) -> Path:
    """DIR/<section>.json: ``{"meta": {...}, "tables": [{"title", "headers", "rows"}, ...]}``."""
    path = Path(folder) / f"{section}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": metadata(argv), "tables": tables}, indent=1) + "\n", encoding="utf-8")
    report.progress(f"results written to {path}")
    return path
