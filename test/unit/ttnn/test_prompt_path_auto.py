"""prompt_path="auto" (the node's and the CLI's default for the ttnn engine): the chip prompt
path serves when its warm-up check passes (mask logits of the host path's best queries on one
frame at PCC >= 0.99 against the host path), else the host prompt path serves and the engine
says why (describe()'s prompt_path, which the node puts on /diagnostics, and a warning in the
log). Each failure is forced here through the emulator: a chip path that computes wrong masks,
and one that raises."""

from __future__ import annotations

import copy
import logging

import numpy as np
import pytest
from frames import random_frame
from random_weights import randomise_prompt_path

from tt_sam3_ros.core.exemplars import Exemplar
from tt_sam3_ros.core.segmenter import Sam3Segmenter
from tt_sam3_ros.engines.ttnn_model import prompt_check
from tt_sam3_ros.engines.ttnn_model.prompt_path import ChipPromptPath


@pytest.fixture(scope="module")
def sharp_model(tiny_model):
    """Prompt modules at unit gain: at the tiny model's 0.02 init every mask logit looks alike."""
    model = copy.deepcopy(tiny_model)
    randomise_prompt_path(model)
    return model


def auto_engine(emulator, model, tokenizer):
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    emulator.reset()
    return TtnnEngine(model, tokenizer, ttnn_module=emulator, prompt_path="auto", max_prompts=1)


def serves(engine, prompts=("car",)) -> np.ndarray:
    """One frame through whatever prompt path serves: the best query's mask."""
    frame = random_frame(1, (1008, 1008))
    decoded = engine.decode(engine.encode_image(frame), engine.encode_prompts(list(prompts)), max_instances=1)
    best = np.argmax(decoded.logits, axis=1)
    return engine.fetch_masks(decoded, np.arange(len(prompts)), best)


def test_auto_keeps_the_chip_prompt_path_when_it_agrees(emulator, sharp_model, tokenizer, caplog):
    caplog.set_level(logging.INFO, logger="tt_sam3_ros.engines.ttnn_warmup")
    with auto_engine(emulator, sharp_model, tokenizer) as engine:
        assert engine.describe()["prompt_path"] == "auto"
        engine.warmup()
        assert isinstance(engine.prompt_path, ChipPromptPath)
        status = engine.describe()["prompt_path"]
        assert status.startswith("chip (auto: warm-up check passed, mask logits PCC 0.99")
        assert ">= 0.99 against the host path" in status
        assert any("prompt path: chip (auto" in r.getMessage() for r in caplog.records)
        assert np.isfinite(serves(engine)).all()
        # exemplar boxes are served on the chip prompt path it kept (their box path on the host)
        assert engine.takes_exemplars
        picture = random_frame(2, (120, 160))
        boxes = [Exemplar((20, 10, 70, 60), prompt="car"), Exemplar((90, 40, 150, 110), False, "car")]
        result = Sam3Segmenter(engine)(picture, ["car"], boxes=boxes, threshold=0.0, max_instances=1)
        assert set(result.exemplars) == {"car"} and [i.prompt for i in result.instances] == ["car"]


def test_auto_serves_the_host_path_when_the_chip_masks_disagree(
    emulator, sharp_model, tokenizer, caplog, monkeypatch
):
    """A chip path whose masks are wrong (here: every mask mirrored) fails the check."""
    real = ChipPromptPath.fetch_masks

    def mirrored(self, decoded, prompt_index, query_index):
        return real(self, decoded, prompt_index, query_index)[:, ::-1, :]

    monkeypatch.setattr(ChipPromptPath, "fetch_masks", mirrored)
    caplog.set_level(logging.WARNING, logger="tt_sam3_ros.engines.ttnn_warmup")
    with auto_engine(emulator, sharp_model, tokenizer) as engine:
        chip = engine.prompt_path
        engine.warmup()
        status = engine.describe()["prompt_path"]
        assert status.startswith("host (auto: the chip prompt path failed its warm-up check: mask logits PCC")
        assert "< 0.99 against the host path" in status
        assert engine.prompt_path is chip.host
        assert chip.prompts.traces == {}  # the chip path's traces and buffers are freed
        assert any(
            r.levelno == logging.WARNING and "failed its warm-up check" in r.getMessage()
            for r in caplog.records
        )
        assert engine.describe()["device"].endswith("command queues")
        assert np.isfinite(serves(engine, ("car", "person")[:1])).all()


def test_auto_serves_the_host_path_when_the_chip_path_raises(emulator, sharp_model, tokenizer, monkeypatch):
    def broken(self, image_state, prompt_states, max_instances=None):
        raise RuntimeError("TT_FATAL @ topk_device_operation.cpp: indices out of range\n(on core 3,4)")

    monkeypatch.setattr(ChipPromptPath, "decode", broken)
    with auto_engine(emulator, sharp_model, tokenizer) as engine:
        engine.warmup()
        status = engine.describe()["prompt_path"]
        assert status == (
            "host (auto: the chip prompt path failed its warm-up check: the chip prompt path raised "
            "RuntimeError: 'TT_FATAL @ topk_device_operation.cpp: indices out of range (on core 3,4)')"
        )
        assert np.isfinite(serves(engine)).all()


def test_the_check_compares_the_mask_logits_by_pcc():
    a = np.random.default_rng(0).normal(size=(4, 8, 8))
    assert prompt_check.pcc(a, a) == pytest.approx(1.0)
    assert prompt_check.pcc(a, -a) == pytest.approx(-1.0)
    assert np.isnan(prompt_check.pcc(a, np.full_like(a, np.nan)))
    assert np.isnan(prompt_check.pcc(a, np.zeros_like(a)))
    frame = prompt_check.check_frame(1008)
    assert frame.shape == (1008, 1008, 3) and frame.dtype == np.uint8 and frame.std() > 50
