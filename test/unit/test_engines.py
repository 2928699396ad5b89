"""Engine choice and the torch engine's contract, as a user configuring the node sees them."""

from __future__ import annotations

import numpy as np
import pytest
from frames import random_frame

from tt_sam3_ros import engines
from tt_sam3_ros.engines import EngineError, choose_engine, create_engine
from tt_sam3_ros.engines.base import Engine
from tt_sam3_ros.engines.torch_engine import TorchEngine, resolve_dtype


def test_auto_without_chip_or_gpu_picks_torch_on_cpu_and_says_why(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(engines, "TENSTORRENT_DEVICE_DIR", tmp_path / "absent")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    name, reason = choose_engine("auto", None)
    assert name == "torch"
    assert "no Tenstorrent device" in reason and "CPU" in reason


def test_auto_with_chip_but_no_ttnn_explains(monkeypatch, tmp_path) -> None:
    (tmp_path / "0").touch()
    monkeypatch.setattr(engines, "TENSTORRENT_DEVICE_DIR", tmp_path)
    monkeypatch.setattr(engines.importlib.util, "find_spec", lambda name: None)
    usable, reason = engines.blackhole_status()
    assert not usable and "ttnn is not importable" in reason


def test_auto_with_chip_and_ttnn_picks_ttnn(monkeypatch, tmp_path) -> None:
    (tmp_path / "0").touch()
    monkeypatch.setattr(engines, "TENSTORRENT_DEVICE_DIR", tmp_path)
    monkeypatch.setattr(engines.importlib.util, "find_spec", lambda name: object())
    assert choose_engine("auto", None)[0] == "ttnn"


def test_explicit_torch_device_wins_over_auto() -> None:
    assert choose_engine("auto", "cpu") == ("torch", "device 'cpu' requested, which the torch engine serves")


def test_unknown_engine_is_refused_with_the_choices() -> None:
    with pytest.raises(EngineError, match="auto, torch, ttnn"):
        choose_engine("tpu", None)


def test_cuda_requested_without_cuda_is_a_clear_error(tiny_model, tokenizer, monkeypatch) -> None:
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(EngineError, match="no CUDA device"):
        TorchEngine(tiny_model, tokenizer, device="cuda")


def test_dtype_names(monkeypatch) -> None:
    import torch

    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(EngineError, match="float16"):
        resolve_dtype("float16", torch.device("cpu"))


def test_create_engine_gives_a_working_torch_engine(tiny_model, tokenizer) -> None:
    engine = create_engine("torch", tiny_model, tokenizer, device="cpu", dtype="float32")
    assert isinstance(engine, Engine)
    assert engine.describe()["engine"] == "torch" and engine.describe()["dtype"] == "float32"
    engine.warmup()
    decoded = engine.decode(
        engine.encode_image(np.zeros((1008, 1008, 3), np.uint8)), engine.encode_prompts(["a", "b"])
    )
    queries = tiny_model.config.detr_decoder_config.num_queries
    assert decoded.logits.shape == (2, queries) and decoded.boxes.shape == (2, queries, 4)
    assert decoded.presence.shape == (2,)
    masks = engine.fetch_masks(decoded, np.array([1, 0]), np.array([3, 4]))
    assert masks.shape == (2, 288, 288) and masks.dtype == np.float32


def test_wrong_input_shape_is_refused(tiny_model, tokenizer) -> None:
    engine = TorchEngine(tiny_model, tokenizer)
    with pytest.raises(EngineError, match="1008"):
        engine.encode_image(np.zeros((512, 512, 3), np.uint8))
    with pytest.raises(EngineError, match="uint8"):
        engine.encode_image(np.zeros((1008, 1008, 3), np.float32))


def test_bf16_runs_and_stays_close_to_fp32(tiny_model, tokenizer) -> None:
    import copy

    pixels = random_frame(0, (1008, 1008))
    outputs = {}
    for dtype in ("float32", "bfloat16"):
        engine = TorchEngine(copy.deepcopy(tiny_model), tokenizer, dtype=dtype)
        outputs[dtype] = engine.decode(engine.encode_image(pixels), engine.encode_prompts(["car"]))
    assert outputs["bfloat16"].logits.dtype == np.float32
    np.testing.assert_allclose(outputs["bfloat16"].boxes, outputs["float32"].boxes, atol=0.05)


def test_auto_with_a_chip_id_opens_that_chip(monkeypatch, tmp_path) -> None:
    """A bare integer is a Tenstorrent chip id (torch has no device spelled '1'): auto takes ttnn."""
    (tmp_path / "0").touch()
    (tmp_path / "1").touch()
    monkeypatch.setattr(engines, "TENSTORRENT_DEVICE_DIR", tmp_path)
    monkeypatch.setattr(engines.importlib.util, "find_spec", lambda name: object())
    name, reason = choose_engine("auto", "1")
    assert name == "ttnn"
    assert "device '1' is a Tenstorrent chip id" in reason


def test_auto_with_a_chip_id_but_no_chip_fails_instead_of_running_torch(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(engines, "TENSTORRENT_DEVICE_DIR", tmp_path / "absent")
    with pytest.raises(EngineError, match=r"device '0' is a Tenstorrent chip id, but no Tenstorrent device"):
        choose_engine("auto", "0")


@pytest.mark.parametrize("device", ["cuda:0", "cpu", "chip1"])
def test_ttnn_with_a_device_that_is_no_chip_id_is_a_clear_error(device, tiny_model, tokenizer) -> None:
    with pytest.raises(EngineError, match=rf"engine ttnn: device '{device}' is not a chip id"):
        create_engine("ttnn", tiny_model, tokenizer, device=device)
