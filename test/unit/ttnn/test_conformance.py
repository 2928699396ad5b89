"""The Blackhole code's ttnn calls against the real ttnn 0.81.1 wheel, and bfloat8_b bit-exactness.

The wheel lives in .venv-ttnn (CPython 3.12; `make test` creates it through `make ttnn-env`),
so the check runs there as a subprocess; this side compares its bfloat8_b packing with the
emulator's, since only this environment has torch.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[3]
TTNN_VENV = REPO / ".venv-ttnn"
TOOL = REPO / "tools" / "ttnn_conformance.py"
SAMPLE = Path(__file__).parent / "fixtures" / "conformance_sample.py"


def _ttnn_python() -> Path:
    skipped = TTNN_VENV / "SKIPPED"
    if skipped.exists():
        pytest.skip(f"ttnn conformance not checked: {skipped.read_text().strip()}")
    python = TTNN_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venv-ttnn: run `make ttnn-env` (make test does)")
    return python


def _run(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp / "report.json"
    done = subprocess.run(
        [str(_ttnn_python()), str(TOOL), "--json", str(report), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.exists(), done.stderr[-3000:]
    return done, json.loads(report.read_text())


@pytest.fixture(scope="module")
def project_check(tmp_path_factory):
    """One run over the engine's code, with the bfloat8_b samples."""
    tmp = tmp_path_factory.mktemp("conformance")
    done, report = _run(tmp, "--bfp8-dump", str(tmp / "bfp8.npz"))
    return done, report, tmp / "bfp8.npz"


def test_checker_reports_exactly_the_bad_calls(tmp_path):
    done, report = _run(tmp_path, str(SAMPLE.relative_to(REPO)))
    bad_lines = {i for i, line in enumerate(SAMPLE.read_text().splitlines(), 1) if "# BAD" in line}
    flagged = {int(f["where"].rsplit(":", 1)[1]) for f in report["findings"]}
    assert flagged == bad_lines, report["findings"]
    assert done.returncode == 1


def test_engine_calls_exist_and_take_their_keywords(project_check):
    done, report, _ = project_check
    assert report["ttnn_version"] == "0.81.1"
    assert not report["missing_paths"], report["missing_paths"]
    problems = "\n".join(f"{f['where']}: {f['path']}: {f['problem']}" for f in report["findings"])
    assert not report["findings"], problems
    # The scan really saw the engine: a handful of uses would mean it looked in the wrong place.
    assert report["verified"] >= 40, report
    assert done.returncode == 0


def test_emulator_bfloat8_b_equals_ttnn_host_packing(project_check):
    from ttnn_emulator import quantize_bfloat8_b

    _, report, dump = project_check
    samples = np.load(dump)
    assert report["bfp8_samples"] == len([k for k in samples.files if k.startswith("input_")]) >= 5
    for key in sorted(k for k in samples.files if k.startswith("input_")):
        index = re.sub(r"\D", "", key)
        values = torch.from_numpy(samples[key])
        packed_by_ttnn = torch.from_numpy(samples[f"packed_{index}"])
        emulated = quantize_bfloat8_b(values)
        mismatched = int((emulated.view(torch.int32) != packed_by_ttnn.view(torch.int32)).sum())
        assert mismatched == 0, f"{key} {tuple(values.shape)}: {mismatched} values differ"
