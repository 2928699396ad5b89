"""transformers' Sam3MaskDecoder (the segmentation head) in TT-NN ops.

Here: the head's prompt cross-attention (image tokens attend to the prompt tokens, pre-norm, with a
residual), the pixel decoder, the mask embedder (a 3-layer ReLU MLP on the decoder's normed
queries), the instance projection (a 1x1 conv, so a linear over pixels) and the mask logits, the
dot product of every query's embedding with every pixel's. Not here: the semantic projection (the
engine's post-processing does not read it).

The pixel decoder (Sam3PixelDecoder as Sam3MaskDecoder._embed_pixels feeds it) starts from the
prompt-attended image tokens as a 72 x 72 map and runs two stages, coarse to fine: nearest 2x
upsampling, plus the FPN map of that size (scale 2, then scale 4), 3x3 conv, GroupNorm(8), ReLU.
On the device: ttnn.upsample takes NHWC ROW_MAJOR (a TILE input must have no padded tile, which
72 and 144 wide rows have), the sum and the conv run on TILE rows, and ttnn.group_norm takes
(B, 1, H*W, C) TILE interleaved with ROW_MAJOR weight rows and an input mask made once at upload
(without one the op writes its own to the device on every call, which a trace cannot hold).

Shapes (bfloat16, TILE, DRAM interleaved; B = prompts in the batch):
    encoder  (B, S, C)   the fusion encoder's image tokens (S = 5184).
    prompt   (B, T, C)   prompt tokens padded to a tile; mask (B, 1, S, T) as in fusion_encoder.py.
    fpn      [(1, 1, 288*288, C), (1, 1, 144*144, C)]: the neck's scale-4 and scale-2 maps, shared
                         by every prompt.
    queries  (B, Q, C)   the last decoder layer's output-normed query rows (Q a tile multiple).
    pixels   (B, H*W, C) the pixel decoder's output, pixels in row-major order (H = W = 288).
    logits   (B, Q, H*W) mask logits at 288 x 288: only the rows the caller keeps matter, so the
                         engine gathers the kept queries first (selection.py) and passes k rows.
Weights: prompt_weights.prepare_segmentation_head, uploaded with weights.upload, plus
pixel_decoder_constants (the GroupNorm input mask).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tt_sam3_ros.engines.ttnn_model.attention import AttentionShape, multi_head_attention, sub_weights
from tt_sam3_ros.engines.ttnn_model.config import TILE, DeviceSettings
from tt_sam3_ros.engines.ttnn_model.layers import conv3x3, layer_norm, linear

#: The key of the GroupNorm input mask among the head's device weights.
NORM_MASK = "pixel.norm_mask"
#: The key of group_norm_composite's group-averaging matrix among them: present only when
#: ttnn.group_norm failed its warm-up check (stage_checks.py adds it, with each stage's
#: "pixel.{i}.norm.gamma" and ".beta" rows).
GROUP_MEAN = "pixel.group_mean"


@dataclass(frozen=True)
class PixelDecoderConfig:
    """Sam3PixelDecoder as the device code needs it.

    Attributes:
        channels: C (256).
        groups: GroupNorm groups (8).
        eps: the GroupNorms' epsilon (torch's default 1e-5: the modules are nn.GroupNorm(8, C)).
        side: the coarsest map's side, the fusion encoder's token grid (72).
        stages: upsampling stages that run (2: to 144, then to 288).
    """

    channels: int
    groups: int
    eps: float
    side: int
    stages: int

    @classmethod
    def from_module(cls, pixel_decoder: Any, side: int, stages: int) -> PixelDecoderConfig:
        norms = [pixel_decoder.norms[i] for i in range(stages)]
        if len({(n.num_groups, n.eps) for n in norms}) != 1:
            raise ValueError("the pixel decoder's GroupNorms differ")
        return cls(pixel_decoder.out_channels, norms[0].num_groups, norms[0].eps, side, stages)

    @property
    def output_side(self) -> int:
        return self.side * 2**self.stages


def group_norm_core_columns(grid_x: int, groups: int, channels: int) -> int:
    """Cores ttnn.group_norm splits the channels of an interleaved input over: the largest count
    <= min(grid_x, groups) that divides the groups and leaves each core whole tiles of channels
    (tt-metal's compute_num_virtual_cols; tools/ttnn_mock checks this against the library)."""
    columns = min(grid_x, groups)
    while columns > 0 and ((channels // columns) % TILE or groups % columns):
        columns -= 1
    if columns == 0:
        raise ValueError(f"GroupNorm of {channels} channels in {groups} groups does not split into tiles")
    return columns


#: Tile rows per core that one GroupNorm block may hold: its circular buffers grow about 15 KB
#: per row, and on the mock p150a 81-row blocks fit the 1.5 MB of L1 while 144-row ones did not.
GROUP_NORM_BLOCK_ROWS = 64


def group_norm_program(
    grid: tuple[int, int], channels: int, groups: int, pixels: int, batch: int
) -> tuple[tuple[int, int], int]:
    """(core grid x, y) and num_out_blocks for ttnn.group_norm over (batch, 1, pixels, C).

    The grid is the library's own choice for an interleaved input (find_expected_dram_grid: the
    largest whose virtual rows divide the tile rows and fit the batch), spelled out because
    num_out_blocks needs an explicit grid; the blocks split each core's rows (one sample's when
    there are at least as many samples as virtual rows) into pieces of at most
    GROUP_NORM_BLOCK_ROWS. The library's automatic choice fits 1 or 2 prompts, not 4.
    """
    tile_rows = batch * pixels // TILE
    for x in range(grid[0], 0, -1):
        try:
            columns = group_norm_core_columns(x, groups, channels)
        except ValueError:
            continue
        per_y = x // columns
        for y in range(min(tile_rows // per_y, grid[1]), 0, -1):
            rows = per_y * y
            if tile_rows % rows == 0 and (rows < batch or rows % batch == 0):
                block = tile_rows // batch if batch >= rows else tile_rows // rows
                blocks = next(
                    n for n in range(1, block + 1) if block % n == 0 and block // n <= GROUP_NORM_BLOCK_ROWS
                )
                return (per_y * columns, y), blocks
    raise ValueError(f"no core grid fits a GroupNorm over {batch} x {pixels} pixels")


def pixel_decoder_constants(ttnn: Any, device: Any, config: PixelDecoderConfig) -> dict[str, Any]:
    """The device constants the pixel decoder needs beside its weights: the GroupNorm input mask
    for this device's grid (a host write: make it with the weights, before any capture)."""
    columns = group_norm_core_columns(
        device.compute_with_storage_grid_size().x, config.groups, config.channels
    )
    host = ttnn.create_group_norm_input_mask(config.channels, config.groups, columns)
    return {NORM_MASK: ttnn.to_device(host, device, memory_config=ttnn.DRAM_MEMORY_CONFIG)}


def prompt_cross_attention(
    ttnn: Any,
    encoder: Any,
    prompt: Any,
    mask: Any,
    w: dict[str, Any],
    shape: AttentionShape,
    eps: float,
    settings: DeviceSettings,
) -> Any:
    """encoder + attention(LayerNorm(encoder), prompt, prompt); leaves every input allocated."""
    normed = layer_norm(ttnn, encoder, w, "prompt_attn_norm", eps, settings)
    attended = multi_head_attention(
        ttnn, normed, prompt, prompt, sub_weights(w, "prompt_attn."), shape, settings, mask
    )
    ttnn.deallocate(normed)
    out = ttnn.add(encoder, attended, memory_config=settings.memory)
    ttnn.deallocate(attended)
    return out


def _upsample_add(ttnn: Any, x: Any, skip: Any, batch: int, side: int, channels: int, settings) -> Any:
    """nearest-2x(x) + skip: x (B, side^2, C) or (B, 1, side^2, C) TILE, skip (1, 1, 4 side^2, C)
    TILE -> (1, 1, B * 4 side^2, C) TILE, conv2d's flattened NHWC; leaves x and skip allocated."""
    rows = ttnn.to_layout(x, ttnn.ROW_MAJOR_LAYOUT, memory_config=settings.memory)
    image = ttnn.reshape(rows, (batch, side, side, channels))
    upsampled = ttnn.upsample(image, 2, memory_config=settings.memory)
    ttnn.deallocate(rows)
    flat = ttnn.reshape(upsampled, (batch, 1, 4 * side * side, channels))
    tiles = ttnn.to_layout(flat, ttnn.TILE_LAYOUT, memory_config=settings.memory)
    ttnn.deallocate(upsampled)
    summed = ttnn.add(tiles, skip, memory_config=settings.memory)
    ttnn.deallocate(tiles)
    return ttnn.reshape(summed, (1, 1, batch * 4 * side * side, channels))


def pixel_decoder(
    ttnn: Any,
    device: Any,
    encoder: Any,
    fpn: list[Any],
    w: dict[str, Any],
    config: PixelDecoderConfig,
    settings: DeviceSettings,
    conv_weights: dict[str, Any],
    conv_dtype: Any,
) -> Any:
    """Sam3PixelDecoder from the prompt-attended tokens: (B, S, C) -> (B, H*W, C) at 288 x 288.

    `fpn` holds the neck's maps finest first (scale 4, scale 2), as transformers lists them;
    stage i adds fpn[stages - 1 - i]. `conv_weights` keeps the device-prepared convs (see
    layers.conv3x3). Leaves encoder and fpn allocated.
    """
    batch, c, side = encoder.shape[0], config.channels, config.side
    x = encoder
    for stage in range(config.stages):
        summed = _upsample_add(ttnn, x, fpn[config.stages - 1 - stage], batch, side, c, settings)
        if x is not encoder:
            ttnn.deallocate(x)
        side *= 2
        prefix = f"pixel.{stage}."
        host = (w[prefix + "conv.weight"], w[prefix + "conv.bias"])
        convolved = conv3x3(
            ttnn, device, summed, host, prefix + "conv", conv_weights, c, batch, side, settings, conv_dtype
        )
        ttnn.deallocate(summed)
        normed = pixel_norm(ttnn, convolved, w, prefix, config, batch, side, settings)
        ttnn.deallocate(convolved)
        x = ttnn.relu(normed, memory_config=settings.memory)
        ttnn.deallocate(normed)
    return ttnn.reshape(x, (batch, side * side, c))


def pixel_norm(
    ttnn: Any,
    x: Any,
    w: dict[str, Any],
    prefix: str,
    config: PixelDecoderConfig,
    batch: int,
    side: int,
    settings: DeviceSettings,
) -> Any:
    """One pixel-decoder stage's GroupNorm over x (1, 1, B * side^2, C) TILE -> (B, 1, side^2, C)
    TILE; leaves x allocated. ttnn.group_norm, or, when the head's weights hold GROUP_MEAN (the
    warm-up check's fallback, stage_checks.py), group_norm_composite."""
    c = config.channels
    samples = ttnn.reshape(x, (batch, 1, side * side, c))
    if GROUP_MEAN in w:
        return group_norm_composite(
            ttnn,
            samples,
            w[GROUP_MEAN],
            w[prefix + "norm.gamma"],
            w[prefix + "norm.beta"],
            config.eps,
            settings,
        )
    (grid_x, grid_y), blocks = group_norm_program(settings.grid, c, config.groups, side * side, batch)
    return ttnn.group_norm(
        samples,
        num_groups=config.groups,
        epsilon=config.eps,
        input_mask=w[NORM_MASK],
        weight=w[prefix + "norm.weight"],
        bias=w[prefix + "norm.bias"],
        memory_config=settings.memory,
        core_grid=ttnn.CoreGrid(y=grid_y, x=grid_x),
        inplace=False,
        num_out_blocks=blocks,
        compute_kernel_config=settings.exact_kernel,
    )


def group_norm_composite(
    ttnn: Any, x: Any, group_mean: Any, gamma: Any, beta: Any, eps: float, settings: DeviceSettings
) -> Any:
    """GroupNorm without ttnn.group_norm, from reductions, a matmul and elementwise ops: each
    channel's mean over the pixels (ttnn.mean), averaged over its group by `group_mean` (the
    (C, C) matrix of group_mean_matrix), subtracted; the same for the squares of the result
    (the variance, from the centred values, so no cancellation); then times rsqrt(variance + eps)
    and gamma, plus beta ((1, C) rows). x (B, 1, P, C) TILE; leaves it allocated."""
    memory, kernel = settings.memory, settings.exact_kernel

    def group_average(values: Any) -> Any:
        channel = ttnn.mean(values, dim=2, keepdim=True, memory_config=memory, compute_kernel_config=kernel)
        out = ttnn.matmul(channel, group_mean, memory_config=memory, compute_kernel_config=kernel)
        ttnn.deallocate(channel)
        return out

    mean = group_average(x)
    negated = ttnn.mul(mean, -1.0, memory_config=memory)
    ttnn.deallocate(mean)
    centred = ttnn.add(x, negated, memory_config=memory)
    ttnn.deallocate(negated)
    squares = ttnn.mul(centred, centred, memory_config=memory)
    variance = group_average(squares)
    ttnn.deallocate(squares)
    shifted = ttnn.add(variance, eps, memory_config=memory)
    ttnn.deallocate(variance)
    rstd = ttnn.rsqrt(shifted, memory_config=memory)
    ttnn.deallocate(shifted)
    scale = ttnn.mul(rstd, gamma, memory_config=memory)
    ttnn.deallocate(rstd)
    scaled = ttnn.mul(centred, scale, memory_config=memory)
    ttnn.deallocate(centred)
    ttnn.deallocate(scale)
    out = ttnn.add(scaled, beta, memory_config=memory)
    ttnn.deallocate(scaled)
    return out


def mask_embeddings(ttnn: Any, queries: Any, w: dict[str, Any], settings: DeviceSettings) -> Any:
    """Sam3MaskEmbedder: three linears, ReLU fused into the first two; leaves queries allocated."""
    first = linear(ttnn, queries, w, "mask_embed.0", settings, activation="relu", fused=True)
    second = linear(ttnn, first, w, "mask_embed.1", settings, activation="relu", fused=True)
    ttnn.deallocate(first)
    out = linear(ttnn, second, w, "mask_embed.2", settings)
    ttnn.deallocate(second)
    return out


def mask_logits(ttnn: Any, embeddings: Any, pixels: Any, w: dict[str, Any], settings: DeviceSettings) -> Any:
    """einsum("bqc,bchw->bqhw") of the embeddings with the instance-projected pixels: (B, Q, H*W)."""
    instance = linear(ttnn, pixels, w, "instance_proj", settings)
    out = ttnn.matmul(
        embeddings,
        instance,
        transpose_b=True,
        dtype=ttnn.bfloat16,
        memory_config=settings.memory,
        compute_kernel_config=settings.matmul_kernel,
    )
    ttnn.deallocate(instance)
    return out
