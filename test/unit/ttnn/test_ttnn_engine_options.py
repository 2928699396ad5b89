"""The ttnn engine's options (weight cache, device dtypes) from the command line and create_engine,
run on the emulator standing in for the environment's ttnn."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image


@pytest.fixture
def ttnn_installed(ttnn, monkeypatch):
    """The emulator as the environment's `ttnn` (what tt-metal's python_env provides on a host)."""
    monkeypatch.setitem(sys.modules, "ttnn", ttnn)
    return ttnn


def test_the_cli_passes_the_ttnn_options_to_the_engine(ttnn_installed, tmp_path: Path) -> None:
    from tt_sam3_ros.cli import main as cli

    picture = tmp_path / "frame.png"
    Image.fromarray(np.full((60, 80, 3), 90, np.uint8)).save(picture)
    cache, out = tmp_path / "cache", tmp_path / "out"
    status = cli.main([
        "segment", str(picture), "--prompt", "car", "--model", "tiny-random", "--engine", "ttnn",
        "--ttnn-weight-cache", str(cache), "--ttnn-weight-dtype", "bfloat16", "--out", str(out),
    ])  # fmt: skip
    assert status == 0
    report = json.loads((out / "frame.json").read_text())
    assert report["engine"]["engine"] == "ttnn"
    assert "bfloat16 weights" in report["engine"]["dtype"]
    cached = list(cache.rglob("*.emulated.pt"))
    assert cached and all("BFLOAT16" in path.name for path in cached)  # every weight in the dtype asked


def test_create_engine_hands_the_options_over_and_refuses_unknown_ones(
    ttnn_installed, tiny_model, tokenizer, caplog
) -> None:
    from tt_sam3_ros.engines import EngineError, create_engine

    with create_engine("ttnn", tiny_model, tokenizer, ttnn_options={"param_dtype": "float32"}) as engine:
        assert engine.weights["layers.0.fc1.bias"].dtype == ttnn_installed.float32
        assert engine.weights["layers.0.fc1.weight"].dtype == ttnn_installed.bfloat8_b  # the default
    with pytest.raises(EngineError, match="unknown ttnn option"):
        create_engine("ttnn", tiny_model, tokenizer, ttnn_options={"weights_dtype": "bfloat16"})
    with caplog.at_level(logging.WARNING):
        create_engine("torch", tiny_model, tokenizer, device="cpu", ttnn_options={"weight_dtype": "bfloat16"})
    assert "ttnn engine options ['weight_dtype'] are ignored" in caplog.text


def test_create_engine_puts_the_prompt_path_where_asked(ttnn_installed, tiny_model, tokenizer) -> None:
    from tt_sam3_ros.engines import create_engine
    from tt_sam3_ros.engines.base import EngineError
    from tt_sam3_ros.engines.torch_engine import TorchEngine
    from tt_sam3_ros.engines.ttnn_model.prompt_path import ChipPromptPath

    with create_engine("ttnn", tiny_model, tokenizer, ttnn_options={"prompt_path": "chip"}) as engine:
        assert isinstance(engine.prompt_path, ChipPromptPath)
        assert "prompt path on chip" in engine.describe()["dtype"]
    with create_engine("ttnn", tiny_model, tokenizer, ttnn_options={"prompt_path": "host"}) as engine:
        assert isinstance(engine.prompt_path, TorchEngine)
        assert engine.describe()["prompt_path"] == "host"
    with create_engine(
        "ttnn", tiny_model, tokenizer, ttnn_options={"prompt_path": None}, max_prompts=1
    ) as engine:
        assert isinstance(
            engine.prompt_path, ChipPromptPath
        )  # the default, auto: chip until warm-up checks it
        assert engine.describe()["prompt_path"] == "auto"
    with pytest.raises(EngineError, match="prompt_path 'gpu' is not one of auto, host, chip"):
        create_engine("ttnn", tiny_model, tokenizer, ttnn_options={"prompt_path": "gpu"})


def test_the_cli_reads_where_the_prompt_path_runs() -> None:
    import argparse

    from tt_sam3_ros.cli import main as cli

    parser = argparse.ArgumentParser()
    cli._model_arguments(parser)
    assert cli._ttnn_options(parser.parse_args(["--ttnn-prompt-path", "chip"]))["prompt_path"] == "chip"
    assert cli._ttnn_options(parser.parse_args([]))["prompt_path"] is None  # the factory's default: auto
    with pytest.raises(SystemExit):
        parser.parse_args(["--ttnn-prompt-path", "gpu"])


def test_max_prompts_sizes_the_chip_prompt_path_and_more_prompts_are_refused_before_any_work(
    ttnn_installed, tiny_model, tokenizer
) -> None:
    from tt_sam3_ros.core.errors import InputError
    from tt_sam3_ros.core.segmenter import Sam3Segmenter
    from tt_sam3_ros.engines import create_engine

    with create_engine(
        "ttnn", tiny_model, tokenizer, ttnn_options={"prompt_path": "chip"}, max_prompts=2, max_instances=7
    ) as engine:
        assert engine.prompt_path.buckets == (1, 2)  # two bucket compilations at warm-up, not five
        assert engine.prompt_path.kept == 7  # the on-device top-k keeps what calls will ask for
        segmenter = Sam3Segmenter(engine)
        with pytest.raises(InputError, match="too many prompts: 3 given, at most 2 allowed"):
            segmenter(np.zeros((32, 32, 3), np.uint8), ["car", "person", "dog"])
    for bad in (0, 17, True):
        with pytest.raises(InputError, match=r"max_prompts must be an integer in 1\.\.16"):
            create_engine("ttnn", tiny_model, tokenizer, max_prompts=bad)
