"""Fixtures for the TT-NN emulator and the Blackhole engine tests (no chip, no ttnn wheel needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SUPPORT = Path(__file__).resolve().parents[2] / "support"
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
