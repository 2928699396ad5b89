"""`python -m benchmarks --results DIR`: the printed tables, as printed, with their metadata."""

from __future__ import annotations

import json

import pytest

from benchmarks import __main__ as bench_main
from benchmarks.common import report, results


def test_tables_are_recorded_as_printed_under_their_title(capsys) -> None:
    report.recorded()
    report.title("image trace cost model")
    report.table(["stage", "ms"], [["ViT", 1.5], ["neck", "2.48"]])
    assert report.recorded() == [
        {
            "title": "image trace cost model",
            "headers": ["stage", "ms"],
            "rows": [["ViT", "1.5"], ["neck", "2.48"]],
        }
    ]
    assert report.recorded() == []  # read once
    assert "neck   2.48" in capsys.readouterr().out


def test_results_file_holds_the_tables_and_when_where_how(tmp_path) -> None:
    tables = [{"title": "t", "headers": ["a"], "rows": [["1"]]}]
    path = results.write(tmp_path, "host", tables, ["--only", "host", "--results", str(tmp_path)])
    written = json.loads(path.read_text())
    assert path.name == "host.json" and written["tables"] == tables
    assert set(written["meta"]) == {"date", "commit", "machine", "command"}
    assert written["meta"]["command"].startswith("python -m benchmarks --only host")
    assert "cores" in written["meta"]["machine"]


def test_quick_runs_are_not_recorded() -> None:
    with pytest.raises(SystemExit):
        bench_main.parse_args(["--quick", "--results", "somewhere"])


def test_the_raw_output_is_kept_beside_the_tables(tmp_path, capsys) -> None:
    with results.transcript() as printed:
        print("predicted image trace: 25.9 ms")
    assert "25.9 ms" in capsys.readouterr().out  # still printed
    path = results.write(tmp_path, "blackhole", [], ["--only", "blackhole"], printed.getvalue())
    raw = path.with_suffix(".txt").read_text()
    assert raw.startswith("date: ") and raw.endswith("predicted image trace: 25.9 ms\n")


def test_alternating_times_calls_the_runs_in_turn_after_the_warmup() -> None:
    """Side by side: each round calls every run once, so drift over the run falls on all alike."""
    calls: list[str] = []
    samples = report.alternating_times([lambda: calls.append("a"), lambda: calls.append("b")], 3, warmup=1)
    assert calls == ["a", "b"] * 4
    assert [len(taken) for taken in samples] == [3, 3]
    assert all(seconds >= 0 for taken in samples for seconds in taken)
