"""Several chips in one process, by the real ttnn 0.81.1 library on a mock of unlinked p150 boards.

tools/ttnn_mock/chips.py runs as a subprocess of the interpreter with the wheel
(test/support/ttnn_env.py): a crash inside tt-metal fails one test, and the negative control's
crash is what it shows. Each run takes about 20 s, most of it the library's first program build
for the tiny image path: the real library is the point.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from ttnn_env import MOCK_TOOLS, run_mock_tool

#: The real ttnn wheel runs these (the ubuntu24.04 row; other rows deselect them).
pytestmark = pytest.mark.ttnn_wheel

RUNNER = MOCK_TOOLS / "chips.py"


def run_chips(manifest_path: Path, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    return run_mock_tool("mock p150 boards", RUNNER, out, str(manifest_path), *args)


def test_two_boards_are_two_devices_opened_together_each_closing_alone(mock_manifest, tmp_path):
    done, report = run_chips(mock_manifest("tiny"), tmp_path / "report.json", "--boards", "2")
    assert done.returncode == 0 and report["ok"], f"{report.get('error')}\n{done.stderr[-2000:]}"
    phases = {p["phase"]: p for p in report["phases"]}
    assert phases["count"]["devices"] == 2
    # unlinked boards form no mesh: one device per chip is the way
    assert phases["mesh"]["opened"] is False
    assert "only 1 devices are available in the system mesh" in phases["mesh"]["refusal"]
    assert phases["open"]["grids"] == {"0": [13, 10, [0]], "1": [13, 10, [1]]}
    # the engine's image path validated on each chip, the same ops on both
    assert phases["chip 0"]["ops"] == phases["chip 1"]["ops"] > 100
    assert len(phases["chip 1"]["outputs"]) == 4
    # chip 1 closed (taken out of service): chip 0 still replays its frame
    assert phases["close chip 1"]["ok"] and phases["chip 0 after"]["outputs"] == phases["chip 0"]["outputs"]


def test_chips_opened_alone_crash_the_survivor_when_the_later_one_closes(mock_manifest, tmp_path):
    """The negative control: one open per chip (a single-chip engine's way) ties chip 0 to chip 1,
    so chip 0's first op after chip 1 closed crashes the process inside tt-metal."""
    done, report = run_chips(mock_manifest("tiny"), tmp_path / "report.json", "--boards", "2", "--alone")
    phases = {p["phase"]: p for p in report["phases"]}
    assert phases["chip 1"]["ok"] and phases["close chip 1"]["ok"]
    assert report["phase"] == "chip 0 after" and not phases["chip 0 after"]["ok"]
    assert done.returncode == -signal.SIGSEGV, done.stderr[-2000:]
