"""Device tests: a Blackhole p150a and tt-metal's ttnn, else every test here is skipped with the reason.

Options:
    --sam3-model DIR   a local Hugging Face-format SAM 3 (facebook/sam3) to test with; default:
                       seeded random full-size weights (the real ones are gated).
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--sam3-model",
        default=None,
        help="local HF-format SAM 3 directory for the device tests (default: seeded random full-size model)",
    )


@pytest.fixture(scope="session")
def blackhole():
    """The real ttnn module, or a skip saying why there is no chip to test on."""
    from tt_sam3_ros.engines import blackhole_status

    usable, why = blackhole_status()
    if not usable:
        pytest.skip(f"no Blackhole p150a here: {why}")
    # tt-metal then reports allocations made during a trace capture (which replays may clobber).
    os.environ.setdefault("TT_METAL_TRACE_ALLOC_TRACKING", "1")
    import ttnn

    return ttnn
