"""`python -m benchmarks.blackhole.compare_device REPORT [--results FILE]`: measured latencies against
both cost models.

REPORT is the JSON a device run writes (test/device, `--device-report`; the simulator check writes
one too; test/support/device_report.py describes it). For each stage the models price (the image
trace, the prompt trace for 1 and for 4 prompts, the frame to mask with 1 prompt) it prints the
measured median beside the calibrated cost model's and the roofline's predictions (device time;
the measured frame to mask also holds the host's resize and post-processing), as the last
`python -m benchmarks --only blackhole --results benchmarks/results` run recorded them
(benchmarks/results/blackhole.json; `--results` names another), and measured over predicted.
Then the run's warm-up fallbacks, its failed gates, and the device profiler's time per trace when
the run had the profiler. The predictions price the code that was benchmarked: compare a report
with the results of the same commit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..common import report

DEFAULT_RESULTS = Path(__file__).resolve().parents[1] / "results" / "blackhole.json"
#: The report's stages the models price, as test/support/device_report.LATENCY_STAGES names them.
STAGES = ("image trace", "prompt trace, 1 prompt", "prompt trace, 4 prompts", "frame to mask, 1 prompt")
#: Where the blackhole section's tables keep each prediction: table title prefix, the row's first
#: cell, and the header of the roofline and of the calibrated column.
IMAGE_TABLE = "image trace, calibrated"
FRAMES_TABLE = "prompt traces and the frame, calibrated"
ROOFLINE_FRAMES_TABLE = "per frame: upload + image trace"


def _table(results: dict[str, Any], prefix: str) -> dict[str, Any] | None:
    return next((t for t in results.get("tables", []) if t["title"].startswith(prefix)), None)


def _cell(table: dict[str, Any] | None, first: str, header_prefix: str) -> float | None:
    """The number in the row whose first cell is `first`, under the first header starting with
    `header_prefix`; None when the table, the row or the column is missing."""
    if table is None:
        return None
    column = next((i for i, h in enumerate(table["headers"]) if h.startswith(header_prefix)), None)
    row = next((r for r in table["rows"] if str(r[0]) == first), None)
    if column is None or row is None:
        return None
    try:
        return float(str(row[column]).replace(",", ""))
    except ValueError:
        return None


def predictions(results: dict[str, Any]) -> dict[str, tuple[float | None, float | None]]:
    """Stage -> (calibrated ms, roofline ms) from the blackhole section's recorded tables."""
    image = _table(results, IMAGE_TABLE)
    frames = _table(results, FRAMES_TABLE)
    roofline_frames = _table(results, ROOFLINE_FRAMES_TABLE)
    return {
        "image trace": (
            _cell(image, "image trace", "calibrated ms"),
            _cell(image, "image trace", "roofline ms"),
        ),
        "prompt trace, 1 prompt": (
            _cell(frames, "1", "prompt trace calibrated"),
            _cell(frames, "1", "prompt trace roofline"),
        ),
        "prompt trace, 4 prompts": (
            _cell(frames, "4", "prompt trace calibrated"),
            _cell(frames, "4", "prompt trace roofline"),
        ),
        "frame to mask, 1 prompt": (
            _cell(frames, "1", "frame calibrated"),
            _cell(roofline_frames, "1", "frame ms, sequential"),
        ),
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(measured: float | None, predicted: float | None) -> str:
    return "-" if measured is None or not predicted else f"{measured / predicted:.2f}x"


def compare(device_report: dict[str, Any], results: dict[str, Any]) -> list[list[str]]:
    """One row per stage: stage, measured ms, calibrated ms, measured/calibrated, roofline ms,
    measured/roofline ("-" where the report or the results lack the figure)."""
    predicted = predictions(results)
    rows = []
    for stage in STAGES:
        entry = device_report.get("latency_ms", {}).get(stage)
        measured = None if entry is None else float(entry["median"])
        calibrated, roofline = predicted[stage]
        rows.append(
            [
                stage,
                _ms(measured),
                _ms(calibrated),
                _ratio(measured, calibrated),
                _ms(roofline),
                _ratio(measured, roofline),
            ]
        )
    return rows


def print_comparison(device_report: dict[str, Any], results: dict[str, Any], results_name: str) -> None:
    versions = device_report.get("versions", {})
    engines = device_report.get("engines", {})
    first = next(iter(engines.values()), {})
    print(f"device run of {device_report.get('created', '?')}: ttnn {versions.get('ttnn', '?')}")
    if first:
        print(f"device: {first['describe'].get('device', '?')}")
    meta = results.get("meta", {})
    print(f"predictions: {results_name} ({meta.get('command', '?')}, commit {meta.get('commit', '?')})")
    report.title("measured against both cost models (median ms)")
    report.table(
        ["stage", "measured", "calibrated", "measured / calibrated", "roofline", "measured / roofline"],
        compare(device_report, results),
    )
    fallbacks = device_report.get("fallbacks", [])
    report.title(f"warm-up fallbacks taken: {len(fallbacks)}")
    if fallbacks:
        report.table(
            ["engine", "stage", "serves", "reason"],
            [[f["engine"], f["stage"], f["serves"], f["reason"]] for f in fallbacks],
        )
    failed = [g for g in device_report.get("gates", []) if not g["passed"]]
    report.title(f"gates: {len(device_report.get('gates', []))} recorded, {len(failed)} failed")
    if failed:
        report.table(
            ["gate", "figure", "needs"],
            [[g["name"], f"{g['figure']:.4g}", f"{g['comparison']} {g['threshold']:.4g}"] for g in failed],
        )
    profiler = device_report.get("profiler", {})
    if profiler.get("available"):
        report.title("device profiler: device time per trace (programs' kernel time summed)")
        report.table(
            ["trace id", "programs", "device ms"],
            [
                [trace, entry["programs"], f"{entry['device_ms']:.2f}"]
                for trace, entry in profiler["per_trace"].items()
            ],
        )
    else:
        print(f"device profiler: not in this report ({profiler.get('reason', 'no entry')})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.blackhole.compare_device", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("report", type=Path, help="the device run's JSON report")
    parser.add_argument(
        "--results", type=Path, default=DEFAULT_RESULTS, help="the blackhole section's results JSON"
    )
    args = parser.parse_args(argv)
    try:
        device_report = json.loads(args.report.read_text())
        results = json.loads(args.results.read_text())
    except (OSError, ValueError) as error:
        print(f"compare_device: cannot read {error}", file=sys.stderr)
        return 2
    print_comparison(device_report, results, str(args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
