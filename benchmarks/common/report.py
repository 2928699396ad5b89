"""Printing: the machine header and aligned tables, so every run reads the same way."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo where there is one."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_bf16_support() -> str:
    """Which bf16 matrix instructions the CPU has: they decide whether bf16 can pay off here."""
    cpuinfo = Path("/proc/cpuinfo")
    flags: set[str] = set()
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    found = [name for name in ("amx_bf16", "avx512_bf16") if name in flags]
    return ", ".join(found) if found else "none (bf16 is emulated)"


def machine_lines() -> list[str]:
    """CPU, cores, torch threads, bf16 instructions, accelerator and library versions."""
    import torch
    import transformers

    accelerator = "none"
    if torch.cuda.is_available():
        accelerator = torch.cuda.get_device_name(0)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    return [
        f"machine: {cpu_model()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}, "
        f"bf16 instructions: {cpu_bf16_support()}, CUDA: {accelerator}",
        f"software: python {platform.python_version()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}; load average at start {load} "
        "(other processes on these cores slow every number)",
    ]


def progress(text: str) -> None:
    """What a long run is doing now, on stderr so the tables on stdout stay clean."""
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


#: Every table printed since the last ``recorded()``, with the title above it, for
#: ``python -m benchmarks --results DIR`` (benchmarks/results/*.json, the docs' figures).
_RECORDED: list[dict[str, object]] = []
_TITLE = [""]


def title(text: str) -> None:
    """A section heading."""
    _TITLE[0] = text
    print(f"\n== {text} ==", flush=True)


def recorded() -> list[dict[str, object]]:
    """The tables printed since the last call (title, headers, rows as printed), then forgets them."""
    tables = list(_RECORDED)
    _RECORDED.clear()
    return tables


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print rows under headers, columns padded to their widest cell."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    _RECORDED.append({"title": _TITLE[0], "headers": cells[0], "rows": cells[1:]})
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            print("  ".join("-" * width for width in widths))
    print(flush=True)


def ms(seconds: float) -> str:
    """Seconds as milliseconds with sensible precision."""
    value = seconds * 1000.0
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def alternating_times(
    runs: Sequence[Callable[[], object]],
    repeats: int,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> list[list[float]]:
    """Seconds of ``clock`` (wall time unless told) each of ``runs`` takes, called in turn
    ``repeats`` times after ``warmup`` untimed rounds: load from other processes and drift over
    the run fall on all of them alike, so the ratio of two runs' samples taken in one round
    compares them side by side."""
    for _ in range(warmup):
        for run in runs:
            run()
    samples: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, taken in zip(runs, samples, strict=True):
            start = clock()
            run()
            taken.append(clock() - start)
    return samples


def median_time(
    run: Callable[[], object], repeats: int, warmup: int = 1, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Median seconds of ``clock`` (wall time unless told) ``run`` takes, after ``warmup`` untimed calls."""
    (samples,) = alternating_times([run], repeats, warmup, clock)
    return statistics.median(samples)
