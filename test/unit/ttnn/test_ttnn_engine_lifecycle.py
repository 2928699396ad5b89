"""The Blackhole engine's ownership of the chip, through the emulator: open, fall back, refuse, release."""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest

from tt_sam3_ros.engines.base import EngineError


def _engine(ttnn, model, tokenizer, **kwargs):
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    return TtnnEngine(model, tokenizer, ttnn_module=ttnn, **kwargs)


def test_prefers_ethernet_dispatch_and_the_full_grid(ttnn, tiny_model, tokenizer):
    from tt_sam3_ros.engines.base import Engine

    with _engine(ttnn, tiny_model, tokenizer) as engine:
        assert isinstance(engine, Engine)
        assert engine.settings.grid == (12, 10)
        assert "12x10 compute grid, ethernet dispatch" in engine.describe()["device"]


def test_falls_back_to_worker_dispatch_with_a_warning(ttnn, tiny_model, tokenizer, caplog):
    ttnn.SETTINGS.eth_dispatch_supported = False
    with caplog.at_level(logging.WARNING), _engine(ttnn, tiny_model, tokenizer) as engine:
        assert engine.settings.grid == (11, 10)
        assert "worker dispatch" in engine.describe()["device"]
    assert "Ethernet dispatch unavailable" in caplog.text


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
    assert device.capturing is False and device._trace is not None
    engine.close()
    engine.close()
    assert device._trace is None
    ttnn.close_device(ttnn.open_device(device_id=0))  # the chip is free again
    with pytest.raises(EngineError, match="closed"):
        engine.encode_image(np.zeros((1, 3, 1008, 1008), dtype=np.float32))


def test_a_failed_start_releases_the_chip(ttnn, tiny_model, tokenizer, monkeypatch):
    import tt_sam3_ros.engines.ttnn_engine as module

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
