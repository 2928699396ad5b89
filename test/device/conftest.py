"""Device tests: a Blackhole p150a and tt-metal's ttnn, else every test here is skipped with the reason.

Options:
    --sam3-model DIR   a local Hugging Face-format SAM 3 (facebook/sam3) to test with; default:
                       seeded random full-size weights (the real ones are gated).
    --device-report PATH  where the run's JSON report goes (test/support/device_report.py; default
                       device_report.json): versions, every gate's figure, every warm-up fallback,
                       per-stage latency, the device profiler's per-program time when available.
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
    parser.addoption(
        "--device-report",
        default="device_report.json",
        help="the device run's JSON report (default: device_report.json); see docs/device_validation.md",
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


@pytest.fixture(scope="session")
def simulator():
    """The real ttnn module with TT_METAL_SIMULATOR naming Tenstorrent's simulator (ttsim), else a
    skip saying why; a simulator path tt-metal could not load fails with what to do."""
    import importlib.util

    from tt_sam3_ros.engines.base import EngineError
    from tt_sam3_ros.engines.ttnn_model.device import SIMULATOR_ENV, find_simulator

    try:
        path = find_simulator()
    except EngineError as error:
        pytest.fail(str(error), pytrace=False)
    if path is None:
        pytest.skip(f"no simulator: {SIMULATOR_ENV} is not set (docs/device_validation.md, the simulator)")
    if importlib.util.find_spec("ttnn") is None:
        pytest.skip(f"{SIMULATOR_ENV} is set but ttnn is not importable (activate tt-metal's python_env)")
    import ttnn

    return ttnn


@pytest.fixture(scope="session")
def device_report(request):
    """The run's report (device_report.DeviceReport), written when the session ends, whatever
    failed, if any test recorded something in it."""
    from device_report import DeviceReport

    report = DeviceReport(" ".join(sys.argv))
    yield report
    if report.data["engines"] or report.data["gates"]:
        path = report.write(request.config.getoption("--device-report"))
        print(f"\ndevice report: {path.resolve()}")


@pytest.fixture
def gate(device_report, request):
    """gate(name, figure, comparison, threshold) -> bool: records the gate in the report under the
    calling test's id; the test asserts what it returns."""

    def check(name: str, figure: float, comparison: str, threshold: float) -> bool:
        return device_report.gate(name, figure, comparison, threshold, request.node.nodeid)

    return check
