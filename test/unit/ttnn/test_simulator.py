"""Opening a simulated Blackhole (Tenstorrent's ttsim, through TT_METAL_SIMULATOR), off-chip.

ttsim is not installable here (release binaries only), so what is tested is the engine's side:
find_simulator reads TT_METAL_SIMULATOR, refuses a path tt-metal could not load with what to
do, and sets slow dispatch (the only mode ttsim runs); the engine then opens the chip with one
command queue and no trace (the chip prompt path runs its ops eagerly too), and says so in
describe(). The emulator stands in for the simulator.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from frames import random_frame
from random_weights import randomise_prompt_path

from tt_sam3_ros.engines.base import EngineError
from tt_sam3_ros.engines.ttnn_model import device


@pytest.fixture
def ttsim(tmp_path):
    """A folder laid out as ttsim's README asks: the library beside a soc_descriptor.yaml."""
    library = tmp_path / "libttsim_bh.so"
    library.write_bytes(b"\x7fELF")
    (tmp_path / "soc_descriptor.yaml").write_text("grid: {}\n")
    return library


def test_no_simulator_unless_the_variable_names_one():
    environ: dict[str, str] = {}
    assert device.find_simulator(environ) is None and environ == {}
    assert device.find_simulator({"TT_METAL_SIMULATOR": ""}) is None


def test_a_simulator_gets_slow_dispatch(ttsim):
    environ = {"TT_METAL_SIMULATOR": str(ttsim)}
    assert device.find_simulator(environ) == ttsim
    assert environ["TT_METAL_SLOW_DISPATCH_MODE"] == "1"
    kept = {"TT_METAL_SIMULATOR": str(ttsim), "TT_METAL_SLOW_DISPATCH_MODE": "1"}
    assert device.find_simulator(kept) == ttsim


def test_a_simulator_path_tt_metal_cannot_load_is_refused_with_what_to_do(ttsim, tmp_path):
    with pytest.raises(
        EngineError, match=r"TT_METAL_SIMULATOR=.*absent\.so: no such file; point it at ttsim"
    ):
        device.find_simulator({"TT_METAL_SIMULATOR": str(tmp_path / "absent.so")})
    (tmp_path / "soc_descriptor.yaml").unlink()
    with pytest.raises(EngineError, match=r"no soc_descriptor\.yaml beside it; copy tt-metal's"):
        device.find_simulator({"TT_METAL_SIMULATOR": str(ttsim)})


def test_fast_dispatch_on_a_simulator_is_refused(ttsim):
    environ = {"TT_METAL_SIMULATOR": str(ttsim), "TT_METAL_SLOW_DISPATCH_MODE": "0"}
    with pytest.raises(
        EngineError, match="TT_METAL_SLOW_DISPATCH_MODE=0: the simulator runs slow dispatch only"
    ):
        device.find_simulator(environ)


def test_the_engine_opens_a_simulated_chip_without_a_trace(
    ttsim, emulator, tiny_model, tokenizer, monkeypatch
):
    """The prompt modules at unit gain (as test_prompt_path_auto's), so the auto check can tell a
    wrong eager prompt path from the host's."""
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    model = copy.deepcopy(tiny_model)
    randomise_prompt_path(model)

    monkeypatch.setenv("TT_METAL_SIMULATOR", str(ttsim))
    monkeypatch.setenv("TT_METAL_SLOW_DISPATCH_MODE", "1")  # as find_simulator sets it (tested above)
    emulator.reset()
    with TtnnEngine(model, tokenizer, ttnn_module=emulator, prompt_path="auto", max_prompts=1) as engine:
        assert engine.simulator == ttsim
        assert not engine.image_encoder.use_trace and engine.image_encoder.command_queues == 1
        assert engine.dispatch == "slow (simulator)"
        assert f"(simulated: {ttsim}, no trace)" in engine.describe()["device"]
        assert "1 command queues" in engine.describe()["device"]
        engine.warmup()  # the chip prompt path runs eagerly too: no prompt trace either
        assert not engine.image_encoder.captured and engine.prompt_path.prompts.traces == {}
        assert engine.describe()["prompt_path"].startswith("chip (auto: warm-up check passed")
        frame = random_frame(2, (1008, 1008))
        for _ in range(2):  # each frame runs the prompt path's ops again, freeing the last outputs
            decoded = engine.decode(
                engine.encode_image(frame), engine.encode_prompts(["car"]), max_instances=1
            )
            best = np.array([int(np.argmax(decoded.logits[0]))])
            masks = engine.fetch_masks(decoded, np.array([0]), best)
            assert masks.shape == (1, 288, 288) and np.isfinite(masks).all()


def test_no_mock_cluster_unless_the_variable_names_one(tmp_path):
    assert device.find_mock_cluster({}) is None
    assert device.find_mock_cluster({"TT_METAL_MOCK_CLUSTER_DESC_PATH": ""}) is None
    named = {"TT_METAL_MOCK_CLUSTER_DESC_PATH": str(tmp_path / "p150.yaml")}
    assert device.find_mock_cluster(named) == tmp_path / "p150.yaml"


def test_the_engine_runs_a_mock_cluster_without_a_trace(
    emulator, tiny_model, tokenizer, monkeypatch, tmp_path
):
    """On tt-metal's mock cluster ttnn 0.81.1 segfaults in wait_for_event and trace capture
    (docs/design/facts.md, Mock p150a): the engine turns its trace off there, both queues kept,
    and says so in describe(). The emulator stands in for the mock (the real library's run is
    test/integration/test_node_ttnn_mock.py)."""
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    descriptor = tmp_path / "p150_harvest_3_boards_1.yaml"
    monkeypatch.setenv("TT_METAL_MOCK_CLUSTER_DESC_PATH", str(descriptor))
    emulator.reset()
    with TtnnEngine(tiny_model, tokenizer, ttnn_module=emulator, prompt_path="chip", max_prompts=1) as engine:
        assert engine.mock_cluster == descriptor
        assert not engine.image_encoder.use_trace and engine.image_encoder.command_queues == 2
        assert f"(mock: {descriptor}, no trace)" in engine.describe()["device"]
        engine.warmup()
        assert not engine.image_encoder.captured and engine.prompt_path.prompts.traces == {}
