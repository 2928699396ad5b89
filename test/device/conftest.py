"""Device tests: a Blackhole p150a and tt-metal's ttnn, else every test here is skipped with the reason.

Options:
    --sam3-model DIR   a local Hugging Face-format SAM 3 (facebook/sam3) to test with; default:
                       seeded random full-size weights (the real ones are gated).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

SUPPORT = Path(__file__).resolve().parents[1] / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))


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


@pytest.fixture(scope="session")
def sam3_model(blackhole, request):
    """The --sam3-model weights, else the full-size architecture with seeded random weights; the
    test modules sharpen the parts they check in place (disjoint parts: the ViT, the prompt path)."""
    import torch
    from transformers import Sam3Config, Sam3Model

    path = request.config.getoption("--sam3-model")
    if path:
        return Sam3Model.from_pretrained(path, torch_dtype=torch.float32).eval()
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        return Sam3Model(Sam3Config()).eval()
    finally:
        torch.random.set_rng_state(state)


@pytest.fixture(scope="session")
def real_weights(request) -> bool:
    """Whether the tests run on the real SAM 3 weights (--sam3-model)."""
    return bool(request.config.getoption("--sam3-model"))
