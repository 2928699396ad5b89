"""The JSON report a device run writes: what the owner of a chip (or of the simulator) sends back.

test/device's conftest makes one DeviceReport per session and writes it at the end
(``--device-report PATH``, default device_report.json); the simulator check writes one too.
``python -m benchmarks.blackhole.compare_device REPORT`` prints its latencies against both cost models.

What it holds (schema SCHEMA):
- versions: ttnn's version and where it was imported from, the tt-metal commit when
  TT_METAL_HOME is a git checkout, the firmware and board from ``tt-smi -s`` when it runs;
- engines: per engine the tests built, its describe() (device, grid, dispatch, dtypes, every
  warm-up verdict) and its warm-up checks (stage_checks.StageCheck: the form that serves, the
  figure, whether a fallback serves); ``fallbacks`` lists every fallback taken;
- gates: every gate a test applied, with its figure, its comparison and whether it passed;
- latency_ms: per stage (LATENCY_STAGES names the ones compare_device prices), the median and
  the samples it came from;
- profiler: per-program device time from tt-metal's device profiler when the run had it
  (TT_METAL_DEVICE_PROFILER=1, TT_METAL_PROFILER_MID_RUN_DUMP=1,
  TT_METAL_PROFILER_CPP_POST_PROCESS=1 on a profiler build), summed per trace; else why not.
"""

from __future__ import annotations

import datetime
import json
import operator
import os
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Any

SCHEMA = 1
#: The stages whose latency compare_device sets beside the cost models' predictions.
LATENCY_STAGES = (
    "image trace",
    "prompt trace, 1 prompt",
    "prompt trace, 4 prompts",
    "frame to mask, 1 prompt",
)
#: The environment tt-metal's device profiler needs for per-program data in Python.
PROFILER_ENV = (
    "TT_METAL_DEVICE_PROFILER",
    "TT_METAL_PROFILER_MID_RUN_DUMP",
    "TT_METAL_PROFILER_CPP_POST_PROCESS",
)
COMPARISONS = {">=": operator.ge, "<=": operator.le, "<": operator.lt, ">": operator.gt, "==": operator.eq}
#: How long a version probe (git, tt-smi) may take.
PROBE_TIMEOUT_S = 30


class DeviceReport:
    """One run's report; tests add to it, the session writes it."""

    def __init__(self, command: str = "") -> None:
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": command,
            "versions": {},
            "engines": {},
            "fallbacks": [],
            "gates": [],
            "latency_ms": {},
            "profiler": {"available": False, "reason": "not read"},
        }

    def gate(self, name: str, figure: float, comparison: str, threshold: float, test: str = "") -> bool:
        """Record one gate and return whether it passed (tests assert the return value)."""
        passed = bool(COMPARISONS[comparison](figure, threshold))
        self.data["gates"].append(
            {
                "test": test,
                "name": name,
                "figure": figure,
                "comparison": comparison,
                "threshold": threshold,
                "passed": passed,
            }
        )
        return passed

    def latency(self, stage: str, samples_ms: list[float]) -> float:
        """Record a stage's latency samples; returns their median."""
        median = float(statistics.median(samples_ms))
        self.data["latency_ms"][stage] = {"median": median, "samples": [float(s) for s in samples_ms]}
        return median

    def engine(self, label: str, engine: Any) -> None:
        """Record an engine's description and its warm-up checks (and the fallbacks among them),
        and the versions of its ttnn the first time."""
        if not self.data["versions"]:
            self.versions(engine.ttnn)
        checks = [check.as_dict() for check in getattr(engine, "stage_checks", {}).values()]
        x, y = engine.settings.grid
        self.data["engines"][label] = {
            "describe": dict(engine.describe()),
            "grid": [x, y],
            "dispatch": engine.dispatch,
            "command_queues": engine.image_encoder.command_queues,
            "stage_checks": checks,
        }
        self.data["fallbacks"] += [{"engine": label, **check} for check in checks if check["fell_back"]]

    def versions(self, ttnn: Any) -> None:
        """ttnn's version and origin, the tt-metal commit, the firmware (each: the value or why not)."""
        versions = self.data["versions"]
        versions["ttnn"] = str(getattr(ttnn, "__version__", "unknown"))
        versions["ttnn_module"] = str(getattr(ttnn, "__file__", ""))
        home = os.environ.get("TT_METAL_HOME")
        versions["tt_metal_commit"] = (
            _probe(["git", "-C", home, "rev-parse", "HEAD"]) if home else "TT_METAL_HOME not set"
        )
        versions["firmware"] = firmware()

    def profile(self, ttnn: Any, device: Any) -> None:
        """Per-program device time from tt-metal's device profiler, summed per trace, when available."""
        missing = [name for name in PROFILER_ENV if os.environ.get(name) != "1"]
        profiler = getattr(getattr(ttnn, "_ttnn", None), "profiler", None)
        if missing or profiler is None or not hasattr(ttnn, "ReadDeviceProfiler"):
            why = f"set {', '.join(missing)}=1 on a profiler build" if missing else "no profiler bindings"
            self.data["profiler"] = {"available": False, "reason": why}
            return
        try:
            ttnn.ReadDeviceProfiler(device)
            per_chip = profiler.get_all_programs_perf_data()
        except Exception as error:  # the report says why instead of failing the run
            self.data["profiler"] = {"available": False, "reason": f"{type(error).__name__}: {error}"}
            return
        self.data["profiler"] = {"available": True, **summarise_programs(per_chip)}

    def write(self, path: str | Path) -> Path:
        target = Path(path)
        target.write_text(json.dumps(self.data, indent=1, default=str))
        return target


def summarise_programs(per_chip: dict[Any, list[Any]]) -> dict[str, Any]:
    """tt-metal's ProgramAnalysisData per chip -> rows (runtime id, trace id, cores, each analysis's
    duration in ns) and per-trace totals (programs, device ms: the traces' device time)."""
    rows, traces = [], {}
    for chip, programs in per_chip.items():
        for program in programs:
            uid = program.program_execution_uid
            durations = {
                str(name): int(result.duration) for name, result in program.program_analyses_results.items()
            }
            trace = None if uid.trace_id is None else int(uid.trace_id)
            rows.append(
                {
                    "chip": int(chip),
                    "runtime_id": int(uid.runtime_id),
                    "trace_id": trace,
                    "cores": int(program.core_count),
                    "duration_ns": durations,
                }
            )
            kernel = next(iter(durations.values()), 0)
            entry = traces.setdefault(str(trace), {"programs": 0, "device_ms": 0.0})
            entry["programs"] += 1
            entry["device_ms"] += kernel / 1e6
    return {"programs": rows, "per_trace": traces}


def firmware() -> dict[str, Any] | str:
    """The first device's firmware versions and board from ``tt-smi -s`` (JSON), or why not."""
    if shutil.which("tt-smi") is None:
        return "tt-smi not on PATH"
    text = _probe(["tt-smi", "-s"])
    try:
        snapshot = json.loads(text)
        device = snapshot["device_info"][0]
        return {"firmwares": device.get("firmwares", {}), "board": device.get("board_info", {})}
    except (ValueError, KeyError, IndexError, TypeError) as error:
        return f"tt-smi -s not read ({type(error).__name__}): {text[:200]}"


def _probe(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{command[0]} failed: {error}"
    return (
        done.stdout.strip()
        if done.returncode == 0
        else f"{command[0]} exit {done.returncode}: {done.stderr[:200]}"
    )
