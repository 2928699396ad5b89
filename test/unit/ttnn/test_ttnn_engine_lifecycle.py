"""The Blackhole engine's ownership of the chip, through the emulator: open, fall back, refuse, release."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from ttnn_env import ttnn_package

from tt_sam3_ros.engines.base import EngineError

REPO = Path(__file__).resolve().parents[3]


def _engine(ttnn, model, tokenizer, **kwargs):
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    return TtnnEngine(model, tokenizer, ttnn_module=ttnn, **kwargs)


@pytest.mark.parametrize("harvested, grid", [(2, (11, 10)), (1, (12, 10)), (0, (13, 10))])
def test_opens_with_worker_dispatch_and_reads_the_grid(ttnn, tiny_model, tokenizer, harvested, grid):
    from tt_sam3_ros.engines.base import Engine

    ttnn.SETTINGS.harvested_columns = harvested
    with _engine(ttnn, tiny_model, tokenizer) as engine:
        assert isinstance(engine, Engine)
        assert engine.device.dispatch_core_config.type is None  # tt-metal's own default
        assert engine.settings.grid == grid
        described = engine.describe()["device"]
        assert f"{grid[0]}x{grid[1]} compute grid, worker dispatch, 2 command queues" in described
        assert engine.device.num_command_queues == 2


def test_ethernet_dispatch_only_when_asked_and_falls_back(ttnn, tiny_model, tokenizer, caplog):
    with (
        caplog.at_level(logging.WARNING),
        _engine(ttnn, tiny_model, tokenizer, dispatch="ethernet") as engine,
    ):
        assert engine.dispatch == "worker" and engine.settings.grid == (11, 10)
    assert "Ethernet dispatch did not open" in caplog.text and "No core coordinate" in caplog.text
    ttnn.SETTINGS.eth_dispatch_opens = True
    with _engine(ttnn, tiny_model, tokenizer, dispatch="ethernet") as engine:
        assert engine.dispatch == "ethernet" and engine.settings.grid == (12, 10)
        assert "12x10 compute grid, ethernet dispatch" in engine.describe()["device"]
    with pytest.raises(EngineError, match="dispatch 'eth'"):
        _engine(ttnn, tiny_model, tokenizer, dispatch="eth")


def _descriptor(root: Path, cores: int) -> Path:
    """A tt-metal root whose Ethernet-dispatch core descriptor lists `cores` dispatch cores."""
    from tt_sam3_ros.engines.ttnn_model.device import ETH_DISPATCH_DESCRIPTOR

    listed = {"dispatch_cores": [[0, index] for index in range(cores)], "dispatch_core_type": "ethernet"}
    variants = {name: {"col": {1: listed, 2: listed}} for name in ("unharvested", "2xharvested")}
    path = root / ETH_DISPATCH_DESCRIPTOR
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(variants))
    return root


@pytest.mark.ttnn_wheel
def test_the_probe_reads_the_installed_wheels_descriptor_as_cannot_open():
    """The real ttnn 0.81.1 wheel's descriptor lists 14 Ethernet dispatch cores (docs/design/facts.md,
    tt-metal review)."""
    from tt_sam3_ros.engines.ttnn_model.device import ethernet_dispatch_probe

    opens, reason = ethernet_dispatch_probe(None, roots=[ttnn_package()])
    assert not opens and "lists 14 Ethernet dispatch cores" in reason and "at most 12" in reason


@pytest.mark.parametrize(
    "cores, text, expected",
    [(12, None, True), (14, None, False), (None, "col: [unclosed", False), (None, "[]", False)],
)
def test_the_probe_decides_from_the_descriptor(tmp_path, cores, text, expected):
    from tt_sam3_ros.engines.ttnn_model.device import ETH_DISPATCH_DESCRIPTOR, ethernet_dispatch_probe

    if cores is not None:
        _descriptor(tmp_path, cores)
    else:
        (tmp_path / ETH_DISPATCH_DESCRIPTOR).parent.mkdir(parents=True)
        (tmp_path / ETH_DISPATCH_DESCRIPTOR).write_text(text)
    opens, reason = ethernet_dispatch_probe(None, roots=[tmp_path])
    assert opens is expected, reason
    assert str(tmp_path) in reason
    assert ethernet_dispatch_probe(None, roots=[tmp_path / "elsewhere"]) == (
        False,
        "no Ethernet-dispatch core descriptor found in the installed build",
    )


def test_auto_dispatch_opens_ethernet_only_where_the_build_can(
    ttnn, tiny_model, tokenizer, tmp_path, monkeypatch, caplog
):
    ttnn.SETTINGS.eth_dispatch_opens = True  # a build that would open it, if asked
    monkeypatch.setenv("TT_METAL_RUNTIME_ROOT", str(_descriptor(tmp_path / "bad", 14)))
    with caplog.at_level(logging.INFO), _engine(ttnn, tiny_model, tokenizer) as engine:
        assert engine.dispatch == "worker" and engine.device.dispatch_core_config.type is None
    assert "lists 14 Ethernet dispatch cores" in caplog.text
    monkeypatch.setenv("TT_METAL_RUNTIME_ROOT", str(_descriptor(tmp_path / "good", 12)))
    with _engine(ttnn, tiny_model, tokenizer) as engine:
        assert engine.dispatch == "ethernet" and engine.settings.grid == (12, 10)


def test_a_failed_ethernet_open_that_breaks_the_process_is_reported(ttnn, tiny_model, tokenizer):
    ttnn.SETTINGS.failed_open_breaks_process = True
    with pytest.raises(
        EngineError, match=r"ethernet dispatch: .*No core coordinate.*worker dispatch: .*any more"
    ):
        _engine(ttnn, tiny_model, tokenizer, dispatch="ethernet")


@pytest.mark.parametrize("situation", ["absent", "held"])
def test_clear_error_when_the_chip_is_absent_or_held(ttnn, tiny_model, tokenizer, situation):
    if situation == "absent":
        ttnn.SETTINGS.num_devices = 0
    else:
        ttnn.SETTINGS.busy_device_ids.add(0)
    with pytest.raises(EngineError, match="absent, or held by another process"):
        _engine(ttnn, tiny_model, tokenizer)


def test_refuses_meshes_other_than_one_chip(ttnn, tiny_model, tokenizer):
    with pytest.raises(EngineError, match="1x1"):
        _engine(ttnn, tiny_model, tokenizer, mesh_shape=(2, 1))
    ttnn.close_device(ttnn.open_device(device_id=0))  # nothing was left open


def test_close_releases_trace_and_chip_and_is_idempotent(ttnn, tiny_model, tokenizer):
    engine = _engine(ttnn, tiny_model, tokenizer)
    engine.warmup_image_path()
    device = engine.device
    assert device.capturing is False and len(device._traces) == 1
    engine.close()
    engine.close()
    assert not device._traces
    ttnn.close_device(ttnn.open_device(device_id=0))  # the chip is free again
    with pytest.raises(EngineError, match="closed"):
        engine.encode_image(np.zeros((1008, 1008, 3), dtype=np.uint8))


def test_a_failed_start_releases_the_chip(ttnn, tiny_model, tokenizer, monkeypatch):
    import tt_sam3_ros.engines.ttnn_model.image_encoder as module

    def broken_upload(*args, **kwargs):
        raise RuntimeError("DRAM allocation failed")

    monkeypatch.setattr(module, "upload", broken_upload)
    with pytest.raises(RuntimeError, match="DRAM"):
        _engine(ttnn, tiny_model, tokenizer)
    ttnn.close_device(ttnn.open_device(device_id=0))


def test_weight_cache_skips_the_conversion_on_restart(ttnn, tiny_model, tokenizer, tmp_path, monkeypatch):
    from ttnn_emulator import _runtime

    with _engine(ttnn, tiny_model, tokenizer, weight_cache=tmp_path) as engine:
        first = {name: ttnn.to_torch(t) for name, t in engine.weights.items() if t.device() is not None}
    cached = list(tmp_path.rglob("*.emulated.pt"))
    assert len(cached) == len(first)
    conversions = []
    original = _runtime.from_torch
    monkeypatch.setattr(_runtime, "from_torch", lambda *a, **k: conversions.append(1) or original(*a, **k))
    with _engine(ttnn, tiny_model, tokenizer, weight_cache=tmp_path) as engine:
        assert conversions == []
        for name, values in first.items():
            assert (ttnn.to_torch(engine.weights[name]) == values).all(), name


def test_weight_dtypes_are_configurable(ttnn, tiny_model, tokenizer):
    with _engine(ttnn, tiny_model, tokenizer, weight_dtype="bfloat16") as engine:
        assert engine.weights["layers.0.fc1.weight"].dtype == ttnn.bfloat16
    with _engine(ttnn, tiny_model, tokenizer) as engine:
        assert engine.weights["layers.0.fc1.weight"].dtype == ttnn.bfloat8_b
        assert engine.weights["layers.0.fc1.bias"].dtype == ttnn.bfloat16
    with pytest.raises(EngineError, match="weight_dtype"):
        _engine(ttnn, tiny_model, tokenizer, weight_dtype="int8")


def test_warns_when_ttnn_is_not_the_checked_release(ttnn, tiny_model, tokenizer, monkeypatch, caplog):
    monkeypatch.setattr(ttnn, "__version__", "0.79.0")
    with caplog.at_level(logging.WARNING), _engine(ttnn, tiny_model, tokenizer):
        pass
    assert "ttnn 0.79.0 found" in caplog.text and "0.81.1" in caplog.text


def test_missing_ttnn_gives_an_actionable_error(monkeypatch):
    from tt_sam3_ros.engines.ttnn_engine import load_ttnn

    monkeypatch.setitem(sys.modules, "ttnn", None)
    with pytest.raises(EngineError, match="tt-metal"):
        load_ttnn(None)


def test_a_failed_trace_capture_releases_its_trace(ttnn):
    """A capture that raises must not leave a trace id behind (it would look captured, and the
    device could not close): the trace is released and a later capture starts afresh."""
    import torch

    from tt_sam3_ros.engines.ttnn_model.trace import TracedPath

    device = ttnn.open_device(device_id=0, trace_region_size=1 << 20)
    weight = ttnn.from_torch(torch.eye(32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
    calls = []

    def forward(x):
        calls.append(device.capturing)
        if device.capturing and len(calls) == 2:
            raise RuntimeError("program cache miss during capture")
        return [ttnn.matmul(x, weight)]

    path = TracedPath(ttnn, device, forward)
    frame = ttnn.from_torch(torch.ones(32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    with pytest.raises(RuntimeError, match="cache miss"):
        path.capture(frame)
    assert not path.captured and not device._traces and not device.capturing
    path.capture(frame)  # a retry captures a fresh trace
    assert path.captured
    assert torch.equal(ttnn.to_torch(path.run(frame)[0]).float(), torch.ones(32, 32))
    path.release()
    ttnn.close_device(device)


def test_the_engine_keeps_no_host_vit_and_leaves_the_model_as_it_was(ttnn, tiny_model, tokenizer):
    """Once its weights are on the chip, nothing in the engine holds the host's ViT (so it is freed
    when the caller drops the model), and a bfloat16 prompt path does not cast the caller's model."""
    import copy
    import gc
    import weakref

    import torch

    model = copy.deepcopy(tiny_model)
    backbone = weakref.ref(model.vision_encoder.backbone)
    with _engine(ttnn, model, tokenizer, dtype="bfloat16") as engine:
        assert all(p.dtype == torch.float32 for p in model.parameters())  # the caller's model is untouched
        assert model.vision_encoder.backbone is backbone()
        assert engine.prompt_path.dtype == torch.bfloat16
        del model
        gc.collect()
        assert backbone() is None  # only the caller kept the ViT alive
        assert len(engine.encode_prompts(["car"])) == 1


def test_the_prompt_path_is_replaceable(ttnn, tiny_model, tokenizer):
    from tt_sam3_ros.engines.ttnn_engine import host_prompt_path

    class Recording:
        def __init__(self):
            self.inner = host_prompt_path(tiny_model, tokenizer)
            self.dtype = self.inner.dtype
            self.calls: list[str] = []

        def __getattr__(self, name):
            self.calls.append(name)
            return getattr(self.inner, name)

    prompt_path = Recording()
    with _engine(ttnn, tiny_model, tokenizer, prompt_path=prompt_path) as engine:
        engine.warmup()
        assert engine.prompt_path is prompt_path
    assert {"image_features", "encode_prompts", "decode", "fetch_masks", "close"} <= set(prompt_path.calls)


def _upload(ttnn, engine):
    """One op on the engine's chip: a frame's pixels up to its DRAM (what every frame starts with)."""
    pixels = engine._host_input(np.full((engine.config.image_side,) * 2 + (3,), 90, dtype=np.uint8))
    return ttnn.to_device(pixels, engine.device, memory_config=ttnn.DRAM_MEMORY_CONFIG)


def test_engines_on_chips_opened_together_close_one_at_a_time(ttnn, tiny_model, tokenizer):
    """One engine per chip sharing a BlackholeChips: chip 1's engine closes (a chip taken out of
    service) while chip 0's keeps encoding frames, then chip 0's closes; both chips are free."""
    from tt_sam3_ros.engines.ttnn_engine import BlackholeChips

    ttnn.SETTINGS.num_devices = 2
    chips = BlackholeChips([0, 1], ttnn_module=ttnn)
    first = _engine(ttnn, tiny_model, tokenizer, device_id=0, chips=chips, use_trace=False)
    second = _engine(ttnn, tiny_model, tokenizer, device_id=1, chips=chips, use_trace=False)
    assert (first.device.device_id, second.device.device_id) == (0, 1)
    assert "Blackhole p150a 1 (emulated)" in second.describe()["device"]
    second.close()
    assert _upload(ttnn, first).is_allocated()  # chip 0 still serves
    first.close()
    ttnn.CloseDevices(ttnn.CreateDevices([0, 1]))  # both chips are free again


def test_engines_on_chips_opened_alone_take_the_earlier_chip_down_on_close(ttnn, tiny_model, tokenizer):
    """The negative control: each engine opening its own chip, closing the later one closes the
    earlier one too (the real library's behaviour, which the emulator keeps), so chip 0 fails."""
    ttnn.SETTINGS.num_devices = 2
    first = _engine(ttnn, tiny_model, tokenizer, device_id=0, use_trace=False)
    second = _engine(ttnn, tiny_model, tokenizer, device_id=1, use_trace=False)
    second.close()
    with pytest.raises(ttnn.EmulatorError, match="device 0 is closed"):
        _upload(ttnn, first)


def test_chips_opened_together_refuse_an_unknown_chip_and_report_a_failed_open(ttnn, tiny_model, tokenizer):
    from tt_sam3_ros.engines.ttnn_engine import BlackholeChips

    ttnn.SETTINGS.num_devices = 2
    ttnn.SETTINGS.busy_device_ids.add(1)
    chips = BlackholeChips([0, 1], ttnn_module=ttnn)
    with pytest.raises(EngineError, match=r"chip 2 is not one of the chips opened together \(0, 1\)"):
        _engine(ttnn, tiny_model, tokenizer, device_id=2, chips=chips)
    for device_id in (0, 1):  # the same reason for every engine of the set, and nothing left open
        with pytest.raises(EngineError, match=r"cannot open Blackhole chips 0, 1: .*chip 1 is in use"):
            _engine(ttnn, tiny_model, tokenizer, device_id=device_id, chips=chips)
    ttnn.close_device(ttnn.open_device(device_id=0))


def test_chip_count_is_what_ttnn_sees(ttnn, monkeypatch):
    from tt_sam3_ros.engines import chip_count

    monkeypatch.setitem(sys.modules, "ttnn", ttnn)
    ttnn.SETTINGS.num_devices = 4
    assert chip_count() == 4
    assert not ttnn._OPEN_DEVICES, "counting opens no chip"
