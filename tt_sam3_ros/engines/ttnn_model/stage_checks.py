"""Warm-up checks of the chip's risky stages against the host, and the fallback form each failure selects.

On a chip nobody has run this engine on, some kernels may compute wrong numbers without an
error, or fail outright: tt-metal's own issue tracker reports wrong top-k indices on Blackhole,
a DRAM GroupNorm that runs on Blackhole only in a legacy mode, and conv2d with DRAM inputs as
not fully tested there. So before anything is compiled or captured, warm-up runs each risky
stage once on the chip, in the very function the traces call, on inputs made from the check
frame (prompt_check.check_frame, a seeded random texture), and compares it with the same stage
computed on the host in float32. A stage that disagrees or raises falls back to another form,
which is checked the same way; the verdict of each stage (what serves, the figure, the reason)
is a StageCheck, which the engine logs and puts in describe() (so on /diagnostics) and in the
device report.

Stages and their forms, in the order they are tried:
- ``neck_convs`` (image path) and ``pixel_decoder_convs`` (chip prompt path): every 3x3 conv at
  its own size through ttnn.conv2d; else the taps form (layers.conv3x3_taps: pad, nine slices,
  concat, one matmul), for every conv of that path.
- ``topk`` (chip prompt path): ttnn.topk over the decoder's rows (224 at full size, not a power
  of two); else the same row padded to a power of two (selection.top_queries' `widen`); else no
  ttnn.topk: every query read back and ranked on the host (the prompt path's every-query reads).
  Indices must match exactly (the check's values are distinct and exact in bfloat16).
- ``group_norm`` (chip prompt path): ttnn.group_norm for both pixel-decoder stages; else
  segmentation_head.group_norm_composite (ttnn.mean, matmul, elementwise ops).
The engine's warm-up (engines/ttnn_warmup.py, which runs these) adds two more with the same
record: ``input`` (the uint8 upload and its cast, ttnn_warmup.check_input_upload) and
``prompt_path`` (the whole chip prompt path against the host's, prompt_check.py, for
``prompt_path="auto"``), whose fallbacks are the bfloat16 upload and the host prompt path. A
fallback that fails its own check still serves (it is the last form, or the whole prompt path's
check then picks the host path), and the verdict says both figures.

The checks run at batch 1, the kernels' shape for one prompt; the traces run the same programs
at each prompt bucket.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from tt_sam3_ros.engines.ttnn_model import layers, prompt_check, selection
from tt_sam3_ros.engines.ttnn_model import segmentation_head as head
from tt_sam3_ros.engines.ttnn_model.weights import HostWeight, upload

LOG = logging.getLogger(__name__)

#: The agreement a stage must reach against the host: PCC of its output (the prompt path's gate)
#: and, since a PCC does not see a wrong scale or offset, an RMS error at most MAX_RELATIVE_ERROR
#: of the host output's RMS.
GATE = prompt_check.GATE
MAX_RELATIVE_ERROR = 0.1


@dataclass(frozen=True)
class StageCheck:
    """One stage's verdict.

    Attributes:
        stage: "input", "neck_convs", "pixel_decoder_convs", "topk", "group_norm" or "prompt_path".
        serves: the form that serves, in words ("ttnn.conv2d", "taps form", "host top-k", ...).
        passed: whether the chip's first form passed (False: a fallback serves).
        figure: the check's figure for the first form: the lowest PCC over the stage's sites, or
            for topk and input the count of wrong values; None when it raised.
        reason: the verdict in words (what was compared, what was found, what serves).
    """

    stage: str
    serves: str
    passed: bool
    figure: float | None
    reason: str

    @property
    def fell_back(self) -> bool:
        return not self.passed

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fell_back": self.fell_back}

    def log(self) -> None:
        if self.passed:
            LOG.info("warm-up check %s: %s", self.stage, self.reason)
        else:
            LOG.warning("warm-up check %s: %s", self.stage, self.reason)


@dataclass(frozen=True)
class ConvSite:
    """One 3x3 conv as the traces call it: its conv_weights key, host weights, channels and side."""

    key: str
    weight: Any  # host ttnn tensor (C, C, 3, 3)
    bias: Any  # host ttnn tensor (1, 1, 1, C)
    channels: int
    side: int


def frame_features(frame: np.ndarray, side: int, channels: int) -> torch.Tensor:
    """(side*side, channels) float32 features of the check frame: its pixels sampled on a side x
    side grid, mixed into `channels` by a seeded random matrix, with seeded noise (so every
    channel differs and no map is flat), through tanh."""
    generator = torch.Generator().manual_seed(0)
    picks = np.linspace(0, frame.shape[0] - 1, side).round().astype(np.int64)
    pixels = torch.from_numpy(frame[picks][:, picks].reshape(-1, 3).astype(np.float32) / 127.5 - 1.0)
    mix = torch.randn(3, channels, generator=generator)
    noise = torch.randn(side * side, channels, generator=generator)
    return torch.tanh(pixels @ mix + 0.25 * noise)


def tap_weights(weight: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's (Cout, Cin, 3, 3) weight and a bias of Cout values -> the taps form's (9 Cin, Cout)
    matrix (row (dy * 3 + dx) * Cin + i) and (1, Cout) bias row (layers.conv3x3_taps)."""
    out_channels = weight.shape[0]
    matrix = weight.float().permute(2, 3, 1, 0).reshape(-1, out_channels).contiguous()
    return matrix, bias.float().reshape(1, out_channels)


def group_mean_matrix(channels: int, groups: int) -> torch.Tensor:
    """(C, C): entry (i, j) 1 / (C / groups) where channels i and j share a group, else 0; a row of
    per-channel means times it is each channel's group mean (group_norm_composite)."""
    size = channels // groups
    group = torch.arange(channels) // size
    return (group[:, None] == group[None, :]).float() / size


def topk_values(frame: np.ndarray, rows: int) -> torch.Tensor:
    """(1, rows, 1): distinct values, exact in bfloat16 (multiples of 1/8 within +-16), ordered by
    the check frame's first `rows` pixel values (ties broken by position)."""
    order = np.argsort(frame.reshape(-1)[:rows], kind="stable")
    ranks = np.empty(rows, dtype=np.float32)
    ranks[order] = np.arange(rows, dtype=np.float32)
    return torch.from_numpy((ranks - rows / 2) / 8).reshape(1, rows, 1)


def _error(error: Exception) -> str:
    text = " ".join(str(error).split())[: prompt_check.MAX_ERROR_CHARS]
    return f"raised {type(error).__name__}: {text!r}"


def _device(ttnn: Any, device: Any, values: torch.Tensor) -> Any:
    return ttnn.from_torch(
        values.float(),
        dtype=ttnn.bfloat16,
        layout=ttnn.TILE_LAYOUT,
        device=device,
        memory_config=ttnn.DRAM_MEMORY_CONFIG,
    )


def _read(ttnn: Any, tensor: Any) -> torch.Tensor:
    values = ttnn.to_torch(tensor).float()
    ttnn.deallocate(tensor)
    return values


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """RMS of got - expected over the RMS of expected (inf when expected is all zeros)."""
    scale = float(expected.double().pow(2).mean().sqrt())
    error = float((got.double() - expected.double()).pow(2).mean().sqrt())
    return error / scale if scale > 0 else float("inf")


def _worst_pcc(run: Any, sites: list[Any]) -> tuple[float | None, str]:
    """The lowest PCC of run(site) = (got, expected) over the sites, and the first finding in
    words ("" when every site passes both gates); None when a site raised."""
    worst: float | None = 1.0
    for site in sites:
        label = getattr(site, "key", site)
        try:
            got, expected = run(site)
        except Exception as error:  # any failure of the chip's form means: try the next form
            return None, f"{label} {_error(error)}"
        value = prompt_check.pcc(got.numpy(), expected.numpy())
        if not value >= GATE:  # NaN fails too
            return value, f"{label}: PCC {value:.5f} < {GATE}"
        error = relative_error(got, expected)
        if not error <= MAX_RELATIVE_ERROR:
            return (
                value,
                f"{label}: PCC {value:.5f} but RMS error {error:.3f} of the output's > {MAX_RELATIVE_ERROR}",
            )
        worst = min(worst, value)
    return worst, ""


# the 3x3 convolutions ----------------------------------------------------------------------------
def check_convs(
    ttnn: Any,
    device: Any,
    settings: Any,
    stage: str,
    sites: list[ConvSite],
    conv_weights: dict[str, Any],
    conv_dtype: Any,
    matmul_dtype: Any,
    param_dtype: Any,
    frame: np.ndarray,
) -> StageCheck:
    """Each conv through layers.conv3x3 (ttnn.conv2d, preparing its device weights in
    `conv_weights` as the first eager run would) against torch's conv2d on the same input; on
    a failure every site gets the taps form's weights (conv_weights[TAPS + key]) and is checked
    again."""

    def run(site: ConvSite) -> tuple[torch.Tensor, torch.Tensor]:
        values = frame_features(frame, site.side, site.channels).bfloat16().float()
        x = _device(ttnn, device, values.reshape(1, 1, -1, site.channels))
        try:
            out = layers.conv3x3(
                ttnn,
                device,
                x,
                (site.weight, site.bias),
                site.key,
                conv_weights,
                site.channels,
                1,
                site.side,
                settings,
                conv_dtype,
            )
        finally:
            ttnn.deallocate(x)
        got = _read(ttnn, out).reshape(-1)
        image = values.reshape(1, site.side, site.side, site.channels).permute(0, 3, 1, 2)
        weight = ttnn.to_torch(site.weight).float()
        bias = ttnn.to_torch(site.bias).float().reshape(-1)
        expected = torch.nn.functional.conv2d(image, weight, bias, padding=1).permute(0, 2, 3, 1).reshape(-1)
        return got, expected

    first, finding = _worst_pcc(run, sites)
    if not finding:
        return StageCheck(
            stage,
            "ttnn.conv2d",
            True,
            first,
            f"ttnn.conv2d (warm-up check passed: PCC {first:.5f} >= {GATE})",
        )
    for site in sites:
        prepared = conv_weights.pop(site.key, None)
        for tensor in prepared or ():
            if tensor is not None and tensor.device() is not None:
                ttnn.deallocate(tensor)
        matrix, bias = tap_weights(ttnn.to_torch(site.weight), ttnn.to_torch(site.bias))
        placed = upload(
            ttnn,
            device,
            {"weight": HostWeight(matrix, "matmul"), "bias": HostWeight(bias, "param")},
            matmul_dtype,
            param_dtype,
        )
        conv_weights[layers.TAPS + site.key] = (placed["weight"], placed["bias"])
    second, again = _worst_pcc(run, sites)
    verdict = f"its check: PCC {second:.5f}" if not again else f"its check failed too: {again}"
    return StageCheck(
        stage,
        "taps form",
        False,
        first,
        f"taps form: pad, 9 slices, concat, matmul (warm-up check: ttnn.conv2d {finding}; {verdict})",
    )


def neck_sites(encoder: Any, sides: list[int]) -> list[ConvSite]:
    """The image path's four neck convs (ChipImageEncoder's weights, fpn.{level}.proj2)."""
    w, channels = encoder.weights, encoder.config.fpn_dim
    return [
        ConvSite(f"fpn.{level}", w[f"fpn.{level}.proj2.weight"], w[f"fpn.{level}.proj2.bias"], channels, side)
        for level, side in enumerate(sides)
    ]


def pixel_decoder_sites(path: Any) -> list[ConvSite]:
    """The chip prompt path's pixel-decoder convs (pixel.{stage}.conv), at batch 1."""
    pixel, w = path.pixel, path.w_head
    return [
        ConvSite(
            f"pixel.{stage}.conv",
            w[f"pixel.{stage}.conv.weight"],
            w[f"pixel.{stage}.conv.bias"],
            pixel.channels,
            pixel.side * 2 ** (stage + 1),
        )
        for stage in range(pixel.stages)
    ]


# top-k ------------------------------------------------------------------------------------------------
def check_topk(ttnn: Any, path: Any, frame: np.ndarray) -> StageCheck:
    """selection.top_queries as the prompt trace calls it (the path's candidates, k), on distinct
    values, against torch.topk: every index must match. Fallbacks: the padded row, then host top-k
    (path.topk_form)."""
    rows, queries, k = path.decoder.rows, path.decoder.queries, path.kept
    values = topk_values(frame, rows)
    expected = 1 + torch.topk(values[0, 1 : 1 + queries, 0], k).indices

    def wrong_indices() -> tuple[int | None, str]:
        scores = path._tensor(values)
        try:
            found, indices, flags = selection.top_queries(
                ttnn,
                scores,
                path.constants["candidates"],
                k,
                0.0,
                path.settings,
                widen=path.constants.get("widen"),
            )
        except Exception as error:  # any failure of ttnn.topk means: try the next form
            return None, _error(error)
        finally:
            ttnn.deallocate(scores)
        ttnn.deallocate(found)
        ttnn.deallocate(flags)
        got = _read(ttnn, indices).reshape(-1)[:k].long()
        wrong = int((got != expected).sum())
        return wrong, "" if wrong == 0 else f"{wrong} of {k} indices wrong"

    first, finding = wrong_indices()
    if not finding:
        return StageCheck(
            "topk", "ttnn.topk", True, 0, f"ttnn.topk, {rows} wide (warm-up check passed: indices exact)"
        )
    width = selection.padded_width(rows)
    old = path.constants["candidates"]
    path.constants["candidates"] = path._tensor(selection.candidate_row(width, 1, queries))
    path.constants["widen"] = path._tensor(selection.widening_matrix(rows, width))
    ttnn.deallocate(old)
    path.topk_form = "padded"
    _, again = wrong_indices()
    if not again:
        return StageCheck(
            "topk",
            f"padded ttnn.topk, {width} wide",
            False,
            first,
            f"padded ttnn.topk, {width} wide (warm-up check: ttnn.topk {rows} wide {finding}; "
            "the padded form's indices exact)",
        )
    path.topk_form = selection.HOST_TOP_K
    first_rows = torch.arange(1, k + 1, dtype=torch.int32).reshape(1, 1, k)
    for bucket in path.buckets:
        path.constants[f"first_rows.{bucket}"] = ttnn.from_torch(
            first_rows.expand(bucket, 1, k).contiguous(),
            dtype=ttnn.uint16,
            layout=ttnn.TILE_LAYOUT,
            device=path.device,
            memory_config=ttnn.DRAM_MEMORY_CONFIG,
        )
    return StageCheck(
        "topk",
        "host top-k",
        False,
        first,
        f"host top-k: every query read back (warm-up check: ttnn.topk {rows} wide {finding}; "
        f"{width} wide {again})",
    )


# GroupNorm ------------------------------------------------------------------------------------------
def check_group_norm(ttnn: Any, path: Any, frame: np.ndarray) -> StageCheck:
    """segmentation_head.pixel_norm for each pixel-decoder stage against torch's group_norm with
    the model's weights; fallback: group_norm_composite."""
    pixel = path.pixel
    stages = list(range(pixel.stages))

    def run(stage: int) -> tuple[torch.Tensor, torch.Tensor]:
        side, c = pixel.side * 2 ** (stage + 1), pixel.channels
        values = frame_features(frame, side, c).bfloat16().float()
        x = _device(ttnn, path.device, values.reshape(1, 1, -1, c))
        try:
            out = head.pixel_norm(ttnn, x, path.w_head, f"pixel.{stage}.", pixel, 1, side, path.settings)
        finally:
            ttnn.deallocate(x)
        got = _read(ttnn, out).reshape(-1)
        weight, bias = path.host_norms[stage]
        image = values.reshape(1, side * side, c).transpose(1, 2)
        expected = (
            torch.nn.functional.group_norm(image, pixel.groups, weight, bias, pixel.eps)
            .transpose(1, 2)
            .reshape(-1)
        )
        return got, expected

    first, finding = _worst_pcc(run, stages)
    if not finding:
        return StageCheck(
            "group_norm",
            "ttnn.group_norm",
            True,
            first,
            f"ttnn.group_norm (warm-up check passed: PCC {first:.5f} >= {GATE})",
        )
    constants = {head.GROUP_MEAN: HostWeight(group_mean_matrix(pixel.channels, pixel.groups), "param")}
    for stage in stages:
        weight, bias = path.host_norms[stage]
        constants[f"pixel.{stage}.norm.gamma"] = HostWeight(weight.reshape(1, -1), "param")
        constants[f"pixel.{stage}.norm.beta"] = HostWeight(bias.reshape(1, -1), "param")
    path.w_head.update(upload(ttnn, path.device, constants, path._conv_dtype, ttnn.bfloat16))
    second, again = _worst_pcc(run, stages)
    verdict = f"its check: PCC {second:.5f}" if not again else f"its check failed too: stage {again}"
    return StageCheck(
        "group_norm",
        "composite GroupNorm",
        False,
        first,
        "composite GroupNorm: mean, matmul, rsqrt "
        f"(warm-up check: ttnn.group_norm stage {finding}; {verdict})",
    )
