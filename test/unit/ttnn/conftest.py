"""Fixtures for the TT-NN emulator and the Blackhole engine tests (no chip, no ttnn wheel needed)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

SUPPORT = Path(__file__).resolve().parents[2] / "support"
TOOLS = Path(__file__).resolve().parents[3] / "tools"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))


@pytest.fixture
def ttnn():
    """The emulator, with every device closed and default settings before and after the test."""
    import ttnn_emulator

    ttnn_emulator.reset()
    yield ttnn_emulator
    ttnn_emulator.reset()


@pytest.fixture(scope="module")
def emulator():
    """The emulator shared by one test module (an engine built once per module), reset around it."""
    import ttnn_emulator

    ttnn_emulator.reset()
    yield ttnn_emulator
    ttnn_emulator.reset()


@pytest.fixture(scope="session")
def mock_manifest(tmp_path_factory) -> Callable[[str], Path]:
    """The image path's weights manifest of a size (tools/ttnn_mock/manifest.py: "full" or "tiny")
    for the mock runners, written once a session whichever mock test asks for it first."""
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    from ttnn_mock import manifest

    folder = tmp_path_factory.mktemp("mock-manifests")

    @functools.cache
    def write(size: str) -> Path:
        return manifest.write(size, folder / f"{size}.json")

    return write
