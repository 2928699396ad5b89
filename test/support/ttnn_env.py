"""The one way the suite finds the real ttnn wheel's interpreter and runs a mock runner
(tools/ttnn_mock) in it, and the one rule for a check that cannot run: on a developer's machine it
is skipped with the reason; where the ``CI`` environment variable is set (.ci/run sets it) it fails
with that reason, so a green CI run has really run it.

Which interpreter: the suite's own (``sys.executable``) when ttnn is importable there, as in the
main environment (CPython 3.12 with ttnn 0.81.1 and real torch), so the runners drive the real
library with real torch; else .venv-ttnn (`make ttnn-env`: the wheel without torch), as before.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
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


def suite_ttnn() -> Path | None:
    """The ttnn package folder importable by the suite's own interpreter, or None; found without
    importing ttnn (which takes seconds and imports torch)."""
    spec = importlib.util.find_spec("ttnn")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def ttnn_python(check: str) -> Path:
    """The suite's own interpreter when it imports ttnn, else that of .venv-ttnn, else
    ``cannot_run`` naming ``check`` and why neither has the wheel."""
    if suite_ttnn() is not None:
        return Path(sys.executable)
    skipped = TTNN_VENV / "SKIPPED"
    if skipped.exists():
        cannot_run(f"{check} not run: {skipped.read_text().strip()}")
    python = TTNN_VENV / "bin" / "python"
    if not python.exists():
        cannot_run(f"{check} not run: no .venv-ttnn; run `make ttnn-env` (make test does)")
    return python


def ttnn_package() -> Path:
    """The ttnn package folder ttnn_python's interpreter imports (the suite's own, else the one
    inside .venv-ttnn), or ``cannot_run``."""
    own = suite_ttnn()
    if own is not None:
        return own
    packages = sorted(TTNN_VENV.glob("lib/python3.*/site-packages/ttnn"))
    if not packages:
        cannot_run("no .venv-ttnn with the real ttnn wheel; `make ttnn-env` makes it")
    return packages[0]


def run_mock_tool(check: str, tool: Path, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """One run of a mock runner (`tool`, with `args` and ``--json out``) in ttnn_python's interpreter, as a
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
