"""transformers' Sam3VisionNeck in TT-NN ops: the four Sam3FPNLayer scales.

Input: the ViT's (1, tokens, C) in window order. It is put back in row order once, then each
scale works on flattened NHWC tensors (1, 1, H*W, channels), the layout ttnn.conv2d and
ttnn.max_pool2d take:
- 4x: ConvTranspose2d, GELU, ConvTranspose2d (each a matmul + pixel shuffle), 1x1 conv, 3x3 conv;
- 2x: ConvTranspose2d, 1x1 conv, 3x3 conv;
- 1x: 1x1 conv, 3x3 conv;
- 0.5x: 2x2 max pool, 1x1 conv, 3x3 conv.
Outputs: (1, 1, side*side, fpn_dim) bfloat16 TILE per scale, left on the device.
"""

from __future__ import annotations

from typing import Any

from tt_sam3_ros.engines.ttnn_model.config import DeviceSettings, ImagePathConfig
from tt_sam3_ros.engines.ttnn_model.layers import conv3x3


def to_row_order(ttnn: Any, x: Any, config: ImagePathConfig, settings: DeviceSettings) -> Any:
    """(1, tokens, C) window order -> (1, 1, tokens, C) row order, ROW_MAJOR; consumes x."""
    n, w, c = config.windows_per_side, config.window, config.hidden
    rows = ttnn.to_layout(x, ttnn.ROW_MAJOR_LAYOUT, memory_config=settings.memory)
    ttnn.deallocate(x)
    windows = ttnn.reshape(rows, (n, n, w, w, c))  # (window row, window col, row, col, C)
    image = ttnn.permute(windows, (0, 2, 1, 3, 4), memory_config=settings.memory)
    ttnn.deallocate(windows)
    return ttnn.reshape(image, (1, 1, config.tokens, c))


def pixel_shuffle(ttnn: Any, x: Any, side: int, channels: int, settings: DeviceSettings) -> Any:
    """(1, 1, side^2, 4*c) with columns (ky, kx, c) -> (1, 1, (2*side)^2, c) TILE; consumes x."""
    rows = ttnn.to_layout(x, ttnn.ROW_MAJOR_LAYOUT, memory_config=settings.memory)
    ttnn.deallocate(x)
    cells = ttnn.reshape(rows, (side, side, 2, 2, channels))
    shuffled = ttnn.permute(cells, (0, 2, 1, 3, 4), memory_config=settings.memory)
    ttnn.deallocate(cells)
    flat = ttnn.reshape(shuffled, (1, 1, 4 * side * side, channels))
    out = ttnn.to_layout(flat, ttnn.TILE_LAYOUT, memory_config=settings.memory)
    ttnn.deallocate(flat)
    return out


def _upsample(ttnn: Any, x: Any, w: dict[str, Any], step: int, side: int, settings: DeviceSettings) -> Any:
    """One ConvTranspose2d(k=2, s=2): matmul to (ky, kx, c) columns, then pixel shuffle."""
    weight = w[f"up{step}.weight"]
    expanded = ttnn.linear(
        x,
        weight,
        bias=w[f"up{step}.bias"],
        dtype=ttnn.bfloat16,
        memory_config=settings.memory,
        compute_kernel_config=settings.matmul_kernel,
    )
    return pixel_shuffle(ttnn, expanded, side, weight.shape[-1] // 4, settings)


def fpn_layer(
    ttnn: Any,
    device: Any,
    image_rows: Any,
    image_tiles: Any,
    level: int,
    w: dict[str, Any],
    scale: float,
    config: ImagePathConfig,
    settings: DeviceSettings,
    conv_weights: dict[str, Any],
    conv_dtype: Any,
) -> tuple[Any, int]:
    """Sam3FPNLayer at one scale; returns (output (1, 1, side^2, fpn_dim) TILE, side).

    `image_rows` / `image_tiles` are the row-order image in ROW_MAJOR and TILE; both survive.
    `conv_weights` keeps the device-prepared 3x3 weights: the first (eager) call prepares them
    from the host copies, which writes to the device and so must happen before trace capture.
    """
    side = config.grid
    if scale == 4.0:
        half = _upsample(ttnn, image_tiles, w, 1, side, settings)
        activated = ttnn.gelu(half, memory_config=settings.memory)
        ttnn.deallocate(half)
        x = _upsample(ttnn, activated, w, 2, 2 * side, settings)
        ttnn.deallocate(activated)
        side *= 4
    elif scale == 2.0:
        x = _upsample(ttnn, image_tiles, w, 1, side, settings)
        side *= 2
    elif scale == 1.0:
        x = image_tiles
    elif scale == 0.5:
        pooled = ttnn.max_pool2d(
            image_rows,
            1,
            side,
            side,
            config.hidden,
            [2, 2],
            [2, 2],
            [0, 0],
            [1, 1],
            memory_config=settings.memory,
        )
        x = ttnn.to_layout(pooled, ttnn.TILE_LAYOUT, memory_config=settings.memory)
        side //= 2
    else:
        raise ValueError(f"FPN scale {scale} is not supported")
    projected = ttnn.linear(
        x,
        w["proj1.weight"],
        bias=w["proj1.bias"],
        dtype=ttnn.bfloat16,
        memory_config=settings.memory,
        compute_kernel_config=settings.matmul_kernel,
    )
    if x is not image_tiles:
        ttnn.deallocate(x)
    host = (w["proj2.weight"], w["proj2.bias"])
    out = conv3x3(
        ttnn,
        device,
        projected,
        host,
        f"fpn.{level}",
        conv_weights,
        config.fpn_dim,
        1,
        side,
        settings,
        conv_dtype,
    )
    ttnn.deallocate(projected)
    return out, side


def level_weights(weights: dict[str, Any], level: int) -> dict[str, Any]:
    prefix = f"fpn.{level}."
    return {name[len(prefix) :]: value for name, value in weights.items() if name.startswith(prefix)}


def sam3_vision_neck(
    ttnn: Any,
    device: Any,
    x: Any,
    weights: dict[str, Any],
    config: ImagePathConfig,
    settings: DeviceSettings,
    conv_weights: dict[str, Any],
    conv_dtype: Any,
) -> list[Any]:
    """Sam3VisionNeck: ViT output (window order, consumed) -> one (1, 1, side^2, fpn_dim) per scale."""
    image_rows = to_row_order(ttnn, x, config, settings)
    image_tiles = ttnn.to_layout(image_rows, ttnn.TILE_LAYOUT, memory_config=settings.memory)
    outputs = []
    for level, scale in enumerate(config.scale_factors):
        out, _ = fpn_layer(
            ttnn,
            device,
            image_rows,
            image_tiles,
            level,
            level_weights(weights, level),
            scale,
            config,
            settings,
            conv_weights,
            conv_dtype,
        )
        outputs.append(out)
    ttnn.deallocate(image_rows)
    ttnn.deallocate(image_tiles)
    return outputs


def level_sides(config: ImagePathConfig) -> list[int]:
    """Side of each scale's output (288, 144, 72, 36 for SAM 3)."""
    return [int(config.grid * scale) for scale in config.scale_factors]
