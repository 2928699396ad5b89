"""The ttnn engine's warm-up self-checks: which form of each risky part serves on this chip.

The engine (ttnn_engine.py) is the Engine API over the chip; this module is what warm-up runs
once, before serving, to decide what that API runs: the uint8 upload or the bfloat16 one
(check_input_upload), each risky stage's form (check_stages, over the per-stage checks and
their fallbacks in ttnn_model/stage_checks.py), and for ``prompt_path="auto"`` the chip prompt
path or the host's (choose_prompt_path, over ttnn_model/prompt_check.py). Each verdict is a
StageCheck, logged here; the engine keeps them (its stage_checks, input_status and
prompt_path_status, which describe() and /diagnostics report) and applies the fallback it names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from tt_sam3_ros.engines.ttnn_model import neck, prompt_check, stage_checks
from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig
from tt_sam3_ros.engines.ttnn_model.prompt_path import ChipPromptPath
from tt_sam3_ros.engines.ttnn_model.stage_checks import StageCheck

LOG = logging.getLogger(__name__)


def check_input_upload(ttnn: Any, device: Any, memory_config: Any, config: ImagePathConfig) -> StageCheck:
    """Upload the check frame as uint8, cast it to bfloat16 on the chip and read it back.

    The cast is exact (0..255 fit bfloat16), so any difference, or an error, means the chip's
    uint8 path cannot be trusted (tt-metal's uint8 support is partial): the verdict then names
    the bfloat16 upload from the host (twice the bytes, the same values), with the reason; its
    ``reason`` is the engine's input status in both cases.
    """
    frame = prompt_check.check_frame(config.image_side)
    expected = torch.from_numpy(frame).reshape(config.input_shape).float()
    wrong: int | None = None
    try:
        uploaded = ttnn.from_torch(
            expected.to(torch.uint8),
            dtype=ttnn.uint8,
            layout=ttnn.ROW_MAJOR_LAYOUT,
            device=device,
            memory_config=ttnn.DRAM_MEMORY_CONFIG,
        )
        cast = ttnn.typecast(uploaded, ttnn.bfloat16, memory_config=memory_config)
        got = ttnn.to_torch(cast).float().reshape(expected.shape)
        for tensor in (uploaded, cast):
            ttnn.deallocate(tensor)
        wrong = int((got != expected).sum())
        reason = "" if wrong == 0 else f"{wrong} of {expected.numel()} values wrong after the cast"
    except Exception as error:  # any failure of the uint8 path means: upload bfloat16
        text = " ".join(str(error).split())[: prompt_check.MAX_ERROR_CHARS]
        reason = f"raised {type(error).__name__}: {text!r}"
    if not reason:
        status = "uint8 upload, cast on the chip (warm-up check passed: exact)"
        LOG.info("input: %s", status)
        return StageCheck("input", "uint8 upload", True, 0, status)
    status = f"bfloat16 upload (warm-up check: the chip's uint8 cast {reason})"
    LOG.warning("input: %s", status)
    figure = None if wrong is None else float(wrong)
    return StageCheck("input", "bfloat16 upload", False, figure, status)


def check_stages(
    ttnn: Any, device: Any, settings: Any, encoder: Any, config: ImagePathConfig, path: Any
) -> list[StageCheck]:
    """Each risky stage on the chip against the host on inputs from the check frame, each
    falling back alone (stage_checks.py): the image encoder's neck convs, and with a chip prompt
    path its top-k, GroupNorm and pixel-decoder convs. Each verdict is logged; returns them in
    the order they ran."""
    frame = prompt_check.check_frame(config.image_side)
    dtypes = (encoder._matmul_dtype, encoder._matmul_dtype, encoder._param_dtype)
    checks = [
        stage_checks.check_convs(
            ttnn,
            device,
            settings,
            "neck_convs",
            stage_checks.neck_sites(encoder, neck.level_sides(config)),
            encoder._conv_weights,
            *dtypes,
            frame,
        )
    ]
    if isinstance(path, ChipPromptPath):
        checks += [
            stage_checks.check_topk(ttnn, path, frame),
            stage_checks.check_group_norm(ttnn, path, frame),
            stage_checks.check_convs(
                ttnn,
                device,
                settings,
                "pixel_decoder_convs",
                stage_checks.pixel_decoder_sites(path),
                path._conv_weights,
                path._conv_dtype,
                path._conv_dtype,
                encoder._param_dtype,
                frame,
            ),
        ]
    for check in checks:
        check.log()
    return checks


@dataclass(frozen=True)
class PromptPathChoice:
    """What prompt_path="auto" chose: the comparison's verdict, its StageCheck, the engine's
    prompt-path status in words, and the path that serves (the chip's, or its host path)."""

    verdict: prompt_check.PromptPathCheck
    check: StageCheck
    status: str
    serves: Any


def choose_prompt_path(chip: ChipPromptPath, image_outputs: list[Any], read_back: Any) -> PromptPathChoice:
    """The chip prompt path against its host path on one image (`image_outputs` the image
    trace's device outputs on the check frame, `read_back` the same maps read back as
    transformers' vision output): the chip's serves when it passes, else the host's. The caller
    frees the chip path's device buffers when it does not serve."""
    verdict = prompt_check.compare(image_outputs, read_back, chip, chip.host)
    check = StageCheck(
        "prompt_path",
        "chip prompt path" if verdict.passed else "host prompt path",
        verdict.passed,
        verdict.pcc,
        verdict.reason,
    )
    if verdict.passed:
        status = f"chip (auto: warm-up check passed, {verdict.reason})"
        LOG.info("prompt path: %s", status)
        return PromptPathChoice(verdict, check, status, chip)
    status = f"host (auto: the chip prompt path failed its warm-up check: {verdict.reason})"
    LOG.warning("prompt path: %s", status)
    return PromptPathChoice(verdict, check, status, chip.host)
