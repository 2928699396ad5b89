"""The one way the suite finds the real ttnn wheel's interpreter (.venv-ttnn) and runs a mock
runner (tools/ttnn_mock) in it, and the one rule for a check that cannot run: on a developer's
machine it is skipped with the reason; where the ``CI`` environment variable is set (.ci/run sets
it) it fails with that reason, so a green CI run has really run it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Where `make ttnn-env` (tools/bootstrap_ttnn.sh) puts CPython 3.12 with the ttnn wheel.
TTNN_VENV = REPO / ".venv-ttnn"
#: tools/ttnn_mock: the runners that drive the real ttnn wheel on a mock p150a.
MOCK_TOOLS = REPO / "tools" / "ttnn_mock"
#: A crashed or hung library must not hold the suite: a full-size mock run takes about 20 s.
MOCK_TIMEOUT_S = 300


def on_ci() -> bool:
    """True where the CI variable is set to anything but empty, 0 or false (any case)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def cannot_run(reason: str) -> None:
    """Skip the calling test with ``reason``; on CI fail it with the same reason."""
    if on_ci():
        pytest.fail(f"{reason} (CI is set: a check that cannot run fails the run)", pytrace=False)
    pytest.skip(reason)


def ttnn_python(check: str) -> Path:
    """The interpreter of .venv-ttnn, or ``cannot_run`` naming ``check`` and why it is absent."""
    skipped = TTNN_VENV / "SKIPPED"
    if skipped.exists():
        cannot_run(f"{check} not run: {skipped.read_text().strip()}")
    python = TTNN_VENV / "bin" / "python"
    if not python.exists():
        cannot_run(f"{check} not run: no .venv-ttnn; run `make ttnn-env` (make test does)")
    return python


def ttnn_package() -> Path:
    """The installed ttnn package folder inside .venv-ttnn, or ``cannot_run``."""
    packages = sorted(TTNN_VENV.glob("lib/python3.*/site-packages/ttnn"))
    if not packages:
        cannot_run("no .venv-ttnn with the real ttnn wheel; `make ttnn-env` makes it")
    return packages[0]


def run_mock_tool(check: str, tool: Path, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """One run of a mock runner (`tool`, with `args` and ``--json out``) in .venv-ttnn, as a
    subprocess so a crash inside tt-metal fails one test, not pytest; returns the process and the
    JSON report it wrote ({} when it wrote none). Where the runner says the mock is unavailable
    (a wheel it was not written for), ``cannot_run`` naming ``check`` and the runner's reason."""
    done = subprocess.run(
        [str(ttnn_python(check)), str(tool), *args, "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=MOCK_TIMEOUT_S,
    )
    report = json.loads(out.read_text()) if out.exists() else {}
    if "unavailable" in report:
        cannot_run(f"{check} not run: {report['unavailable']}")
    return done, report
