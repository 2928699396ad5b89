"""`make test` / `make run` set up the environment once; the second call installs nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    Path(sys.prefix).resolve() != (REPO / ".venv").resolve(),
    reason="the suite is not running from the repo's .venv",
)
def test_second_setup_installs_nothing() -> None:
    # The interpreter the suite runs on: same version, so nothing may be recreated.
    env = {**os.environ, "VENV": ".venv", "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "tools/bootstrap.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # Every install step announces itself with "bootstrap: <step> ..."; an up-to-date venv runs none.
    assert "..." not in done.stderr, done.stderr
    assert "creating" not in done.stderr, done.stderr


def test_private_vision_msgs_is_kept_out_of_colcon_workspaces() -> None:
    assert (REPO / "interfaces" / "COLCON_IGNORE").exists()
    assert (REPO / "interfaces" / "vision_msgs" / "package.xml").exists()
