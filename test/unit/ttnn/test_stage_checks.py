"""Warm-up's checks of the risky stages (stage_checks.py): each stage runs once on the chip against
the host on inputs from the check frame, and a stage that disagrees or raises falls back to
another form, with the reason in describe() (so on /diagnostics) and in the log.

Each failure is forced here through the emulator, one stage at a time: ttnn.conv2d computing
wrong values (both conv stages take the taps form), ttnn.topk wrong at the engine's width (the
padded row serves) and at every width (host top-k), ttnn.group_norm raising or wrong (the
composite form). Then every failure at once through a whole warm-up with prompt_path "auto": the
fallbacks serve inside the traces, and the whole chip prompt path, fallbacks and all, still
agrees with the host's (its own check, part of the same report)."""

from __future__ import annotations

import copy
import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from frames import random_frame
from random_weights import randomise_prompt_path

from tt_sam3_ros.engines.ttnn_model import selection, stage_checks
from tt_sam3_ros.engines.ttnn_model.prompt_path import ChipPromptPath

#: The stages warm-up checks, in order, with a chip prompt path ("prompt_path" only with "auto").
STAGES = ["input", "neck_convs", "topk", "group_norm", "pixel_decoder_convs"]


def wrong_conv2d(emulator):
    real = emulator.conv2d

    def conv2d(**kwargs):
        out, prepared = real(**kwargs)
        return emulator.mul(out, -1.0), prepared

    return conv2d


def wrong_topk(emulator, only_width: int | None = None):
    """ttnn.topk whose indices are those of the smallest values (at `only_width` wide rows, or all)."""
    real = emulator.topk

    def topk(x, k, **kwargs):
        values, indices = real(x, k, **kwargs)
        if only_width is not None and x.shape[-1] != only_width:
            return values, indices
        emulator.deallocate(indices)
        negated = emulator.mul(x, -1.0)
        smallest, wrong = real(negated, k, **kwargs)
        emulator.deallocate(negated)
        emulator.deallocate(smallest)
        return values, wrong

    return topk


def raising_group_norm(emulator):
    def group_norm(x, **kwargs):
        raise RuntimeError("TT_FATAL @ groupnorm_op.cpp: DRAM group norm needs the legacy mode\n(core 1,1)")

    return group_norm


def wrong_group_norm(emulator):
    real = emulator.group_norm

    def group_norm(x, **kwargs):
        out = real(x, **kwargs)
        return emulator.add(out, out)

    return group_norm


def chip_engine(emulator, model, tokenizer, prompt_path="chip"):
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    emulator.reset()
    return TtnnEngine(model, tokenizer, ttnn_module=emulator, prompt_path=prompt_path, max_prompts=1)


def test_every_stage_passes_on_a_right_chip(emulator, tiny_model, tokenizer, caplog):
    caplog.set_level(logging.INFO, logger="tt_sam3_ros.engines.ttnn_model.stage_checks")
    with chip_engine(emulator, tiny_model, tokenizer) as engine:
        engine.check_input_upload()
        engine.check_stages()
        assert list(engine.stage_checks) == STAGES
        assert all(check.passed and not check.fell_back for check in engine.stage_checks.values())
        described = engine.describe()
        rows = engine.prompt_path.decoder.rows
        assert described["topk"] == f"ttnn.topk, {rows} wide (warm-up check passed: indices exact)"
        for stage, op in (
            ("neck_convs", "conv2d"),
            ("pixel_decoder_convs", "conv2d"),
            ("group_norm", "group_norm"),
        ):
            assert described[stage].startswith(f"ttnn.{op} (warm-up check passed: PCC ")
            assert described[stage].endswith(" >= 0.99)")
            assert engine.stage_checks[stage].figure >= 0.999
        assert engine.prompt_path.topk_form == "chip"
        assert not any(r.levelno >= logging.WARNING for r in caplog.records)


FAILURES = {
    "conv2d wrong": ("neck_convs", "pixel_decoder_convs"),
    "topk wrong at the engine's width": ("topk",),
    "topk wrong at every width": ("topk",),
    "group_norm raises": ("group_norm",),
    "group_norm wrong": ("group_norm",),
}


@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_failing_stage_falls_back_alone(failure, emulator, tiny_model, tokenizer, monkeypatch, caplog):
    rows = 32  # the tiny model's decoder rows: presence + 20 queries, padded to a tile
    forced = {
        "conv2d wrong": ("conv2d", lambda: wrong_conv2d(emulator)),
        "topk wrong at the engine's width": ("topk", lambda: wrong_topk(emulator, only_width=rows)),
        "topk wrong at every width": ("topk", lambda: wrong_topk(emulator)),
        "group_norm raises": ("group_norm", lambda: raising_group_norm(emulator)),
        "group_norm wrong": ("group_norm", lambda: wrong_group_norm(emulator)),
    }[failure]
    monkeypatch.setattr(emulator, forced[0], forced[1]())
    caplog.set_level(logging.INFO, logger="tt_sam3_ros.engines.ttnn_model.stage_checks")
    with chip_engine(emulator, tiny_model, tokenizer) as engine:
        path = engine.prompt_path
        assert path.decoder.rows == rows
        engine.check_stages()
        failed = FAILURES[failure]
        for stage, check in engine.stage_checks.items():
            assert check.fell_back == (stage in failed), (stage, check)
        described = engine.describe()
        for stage in failed:
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert f"warm-up check {stage}: {described[stage]}" in warnings
        if failure == "conv2d wrong":
            for stage, key in (("neck_convs", "fpn.0"), ("pixel_decoder_convs", "pixel.0.conv")):
                assert described[stage].startswith(
                    "taps form: pad, 9 slices, concat, matmul (warm-up check: "
                )
                assert f"ttnn.conv2d {key}: PCC -0.99" in described[stage]
                assert "its check: PCC 0.99" in described[stage]
            assert all(f"taps:fpn.{level}" in engine.image_encoder._conv_weights for level in range(4))
        elif failure == "topk wrong at the engine's width":
            assert described["topk"] == (
                "padded ttnn.topk, 64 wide (warm-up check: ttnn.topk 32 wide 20 of 20 indices wrong; "
                "the padded form's indices exact)"
            )
            assert path.topk_form == "padded" and not path.needs_every_query(1)
        elif failure == "topk wrong at every width":
            assert described["topk"] == (
                "host top-k: every query read back (warm-up check: ttnn.topk 32 wide 20 of 20 indices "
                "wrong; 64 wide 20 of 20 indices wrong)"
            )
            assert path.topk_form == "host" and path.needs_every_query(1)
        else:
            assert described["group_norm"].startswith(
                "composite GroupNorm: mean, matmul, rsqrt (warm-up check: ttnn.group_norm stage 0"
            )
            if failure == "group_norm raises":
                error = "'TT_FATAL @ groupnorm_op.cpp: DRAM group norm needs the legacy mode (core 1,1)'"
                assert f"stage 0 raised RuntimeError: {error}" in described["group_norm"]
                assert engine.stage_checks["group_norm"].figure is None
            else:  # twice the right output: a PCC of 1, caught by the error gate
                assert (
                    "stage 0: PCC 1.00000 but RMS error 1.000 of the output's > 0.1"
                    in described["group_norm"]
                )
            assert "its check: PCC 0.99" in described["group_norm"]


@pytest.fixture(scope="module")
def sharp_model(tiny_model):
    """Prompt modules at unit gain, so the whole prompt path's check can tell a wrong stage."""
    model = copy.deepcopy(tiny_model)
    randomise_prompt_path(model)
    return model


@pytest.mark.timeout(900)
def test_every_fallback_serves_inside_the_traces(emulator, sharp_model, tokenizer, monkeypatch):
    """Every risky op forced wrong at once, through a whole warm-up with prompt_path "auto": each
    stage falls back, the chip prompt path with its fallbacks passes the whole path's check
    against the host's (PCC >= 0.99 of the mask logits), and the engine serves a frame whose best
    masks agree with the host prompt path's on the same features. About a minute on 2 cores: the
    one test that runs the fallback forms inside the image and prompt traces."""
    monkeypatch.setattr(emulator, "conv2d", wrong_conv2d(emulator))
    monkeypatch.setattr(emulator, "topk", wrong_topk(emulator))
    monkeypatch.setattr(emulator, "group_norm", raising_group_norm(emulator))
    with chip_engine(emulator, sharp_model, tokenizer, prompt_path="auto") as engine:
        engine.warmup()
        checks = engine.stage_checks
        assert list(checks) == [*STAGES, "prompt_path"]
        assert [stage for stage, check in checks.items() if check.fell_back] == STAGES[1:]
        assert checks["prompt_path"].passed and checks["prompt_path"].serves == "chip prompt path"
        assert isinstance(engine.prompt_path, ChipPromptPath)
        assert engine.describe()["prompt_path"].startswith("chip (auto: warm-up check passed")
        frame = random_frame(3, (1008, 1008))
        chip = engine.prompt_path
        outputs = engine._run_image_path(frame)
        host = chip.host
        prompts = host.encode_prompts(["car"])
        expected = host.decode(host.image_features(engine._vision_output(outputs)), prompts)
        got = chip.decode(chip.image_features(outputs), prompts, max_instances=1)
        best = np.argsort(-expected.logits[0])[:2]
        index = np.zeros(len(best), dtype=np.int64)
        masks = chip.fetch_masks(got, index, best)  # host top-k: every query's logits were read
        reference = host.fetch_masks(expected, index, best)
        assert stage_checks.prompt_check.pcc(masks, reference) >= stage_checks.GATE
        np.testing.assert_allclose(got.logits[0], expected.logits[0], atol=0.25)


# the host side of the forms ---------------------------------------------------------------------
def test_the_taps_weights_make_the_same_convolution():
    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(8, 5, 3, 3, generator=generator), torch.randn(8, generator=generator)
    image = torch.randn(2, 5, 6, 6, generator=generator)
    matrix, row = stage_checks.tap_weights(weight, bias)
    padded = F.pad(image.permute(0, 2, 3, 1), (0, 0, 1, 1, 1, 1))
    windows = torch.cat(
        [padded[:, dy : dy + 6, dx : dx + 6, :] for dy in range(3) for dx in range(3)], dim=-1
    )
    got = windows @ matrix + row
    expected = F.conv2d(image, weight, bias, padding=1).permute(0, 2, 3, 1)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_the_group_mean_matrix_averages_each_group():
    matrix = stage_checks.group_mean_matrix(8, 2)
    means = torch.arange(8.0).reshape(1, 8)
    assert (means @ matrix).tolist() == [[1.5] * 4 + [5.5] * 4]


def test_the_topk_check_values_are_distinct_and_exact_in_bfloat16():
    frame = stage_checks.prompt_check.check_frame(1008)
    values = stage_checks.topk_values(frame, 224).reshape(-1)
    assert len(set(values.tolist())) == 224
    assert torch.equal(values.bfloat16().float(), values)


@pytest.mark.parametrize(("rows", "width"), [(32, 64), (64, 64), (224, 256), (257, 512)])
def test_the_padded_topk_row_is_a_power_of_two(rows, width):
    assert selection.padded_width(rows) == width
    matrix = selection.widening_matrix(rows, width)
    row = torch.randn(3, 1, rows)
    assert torch.equal((row @ matrix)[..., :rows], row) and not (row @ matrix)[..., rows:].any()
