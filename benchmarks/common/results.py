"""Benchmark results as data: each section's tables with one metadata record, for the docs.

``python -m benchmarks --only SECTION --results benchmarks/results`` writes
benchmarks/results/<section>.json; tools/gen_docs.py renders the docs' figures from those files
(benchmarks/common/figures.py), so a figure quoted anywhere has one source.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from . import report

REPO = Path(__file__).resolve().parents[2]


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


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy."""

    def __init__(self, terminal: TextIO) -> None:
        self.terminal, self.copy = terminal, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.terminal.write(text)

    def flush(self) -> None:
        self.terminal.flush()


@contextlib.contextmanager
def transcript() -> Iterator[io.StringIO]:
    """Everything printed on stdout inside the block, also kept (the raw output of a section)."""
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield tee.copy


def write(
    folder: str | Path, section: str, tables: list[dict[str, Any]], argv: list[str], printed: str = ""
) -> Path:
    """DIR/<section>.json: ``{"meta": {...}, "tables": [{"title", "headers", "rows"}, ...]}``, and the
    section's raw printed output beside it in DIR/<section>.txt."""
    path = Path(folder) / f"{section}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = metadata(argv)
    path.write_text(json.dumps({"meta": meta, "tables": tables}, indent=1) + "\n", encoding="utf-8")
    if printed:
        header = " ".join(f"{key}: {value};" for key, value in meta.items())
        path.with_suffix(".txt").write_text(f"{header}\n{printed}", encoding="utf-8")
    report.progress(f"results written to {path}")
    return path
