"""The device calls every ported block makes: a linear layer, the decoder heads' MLP, a LayerNorm
and a 3x3 convolution (ttnn.conv2d, or its taps form: the warm-up check's fallback).

One home for them, so the image path (ViT, neck) and the prompt path (fusion encoder, decoder,
scoring, segmentation head) put their matmuls, norms and convolutions on the chip with the same
output dtype, memory placement and kernel fidelity.
"""

from __future__ import annotations

import math
from typing import Any

from tt_sam3_ros.engines.ttnn_model.config import TILE, DeviceSettings

#: ttnn.linear's activation names and the unary op (with its parameters) a matmul program fuses
#: for each: GELU's 1.0 asks for the approximate GELU, the one ttnn fuses by default.
FUSED_ACTIVATIONS = {"gelu": ("GELU", 1.0), "relu": ("RELU",)}


def matmul_program(
    ttnn: Any, x: Any, columns: int, settings: DeviceSettings, kernel: Any, activation: str | None = None
) -> Any:
    """A 2-D multicast program config for x @ W with W (K, `columns`) on the device's grid, with
    the bias and `activation` fused into the matmul.

    Without a program config ttnn.linear adds the bias and runs the activation as separate ops
    over the whole output (the real library's graph on a mock p150a shows three device ops for a
    ViT fc1: the matmul, a binary add, a unary GELU); with one it is a single op. The output splits
    into per-core blocks over the grid's rows (the rows of x, batch folded in) and columns; each
    core computes its block one tile row at a time (out_block_h 1: the smallest output buffer, so
    the circular buffers fit beside the L1 activations around the call), K two tiles at a time
    where it divides, in sub-blocks as wide as the destination register allows (4 tiles with fp32
    accumulation, 8 without).
    """
    grid_x, grid_y = settings.grid
    rows = math.prod(list(x.shape)[:-1])
    m_tiles, k_tiles, n_tiles = (math.ceil(v / TILE) for v in (rows, x.shape[-1], columns))
    per_core_m, per_core_n = math.ceil(m_tiles / grid_y), math.ceil(n_tiles / grid_x)
    dest_tiles = 4 if getattr(kernel, "fp32_dest_acc_en", False) else 8
    fused = None
    if activation is not None:
        op, *params = FUSED_ACTIVATIONS[activation]
        fused = ttnn.UnaryWithParam(getattr(ttnn.UnaryOpType, op), *params)
    return ttnn.MatmulMultiCoreReuseMultiCastProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(grid_x, grid_y),
        in0_block_w=2 if k_tiles % 2 == 0 else 1,
        out_subblock_h=1,
        out_subblock_w=max(d for d in range(1, dest_tiles + 1) if per_core_n % d == 0),
        out_block_h=1,
        out_block_w=per_core_n,
        per_core_M=per_core_m,
        per_core_N=per_core_n,
        transpose_mcast=False,
        fused_activation=fused,
    )


#: Prefix of a conv's key in `conv_weights` under which its taps form's weights sit: a conv whose
#: taps weights are there runs as conv3x3_taps instead of ttnn.conv2d (stage_checks.py puts them
#: there when ttnn.conv2d fails its warm-up check).
TAPS = "taps:"


def linear(
    ttnn: Any,
    x: Any,
    w: dict[str, Any],
    name: str,
    settings: DeviceSettings,
    activation: str | None = None,
    kernel: Any = None,
    memory: Any = None,
    dtype: Any = None,
    fused: bool = False,
) -> Any:
    """x @ w[name.weight] + w[name.bias] (bias optional), bfloat16 out unless another `dtype`,
    then `activation` if given; at the matmul fidelity unless another ``kernel`` (a compute
    kernel config) is given; the output in `memory` (settings.memory by default). With `fused`,
    through matmul_program: bias and activation inside the matmul, one device op."""
    weight = w[f"{name}.weight"]
    kernel = kernel or settings.matmul_kernel
    program = matmul_program(ttnn, x, weight.shape[-1], settings, kernel, activation) if fused else None
    return ttnn.linear(
        x,
        weight,
        bias=w.get(f"{name}.bias"),
        activation=None if fused else activation,
        dtype=dtype or ttnn.bfloat16,
        memory_config=memory or settings.memory,
        compute_kernel_config=kernel,
        program_config=program,
    )


def decoder_mlp(
    ttnn: Any,
    x: Any,
    w: dict[str, Any],
    name: str,
    layers: int,
    settings: DeviceSettings,
    last_activation: str | None = None,
    hidden_dtype: Any = None,
) -> Any:
    """Sam3DecoderMLP (``name.layer1`` ... ``name.layer{layers}``): relu fused after all but the
    last linear (and `last_activation` after that one), each linear with an activation through
    matmul_program (bias and activation in the matmul), the hidden layers in `hidden_dtype`
    (bfloat16 by default); leaves x allocated."""
    out = x
    for index in range(1, layers + 1):
        activation = "relu" if index < layers else last_activation
        dtype = hidden_dtype if index < layers else None
        step = linear(
            ttnn,
            out,
            w,
            f"{name}.layer{index}",
            settings,
            activation=activation,
            dtype=dtype,
            fused=activation is not None,
        )
        if out is not x:
            ttnn.deallocate(out)
        out = step
    return out


def layer_norm(
    ttnn: Any, x: Any, w: dict[str, Any], name: str, eps: float, settings: DeviceSettings, memory: Any = None
) -> Any:
    """LayerNorm with w[name.weight], w[name.bias] and the layer's own epsilon ``eps``; the output
    in `memory` (settings.memory by default)."""
    return ttnn.layer_norm(
        x,
        epsilon=eps,
        weight=w[f"{name}.weight"],
        bias=w[f"{name}.bias"],
        memory_config=memory or settings.memory,
        compute_kernel_config=settings.exact_kernel,
    )


def conv3x3(
    ttnn: Any,
    device: Any,
    x: Any,
    host_weights: tuple[Any, Any],
    key: str,
    conv_weights: dict[str, Any],
    channels: int,
    batch: int,
    side: int,
    settings: DeviceSettings,
    conv_dtype: Any,
) -> Any:
    """Conv2d(channels, channels, 3, padding=1) over x, flattened NHWC (1, 1, batch*side^2, C);
    returns (1, 1, batch*side^2, C) TILE and leaves x allocated.

    `conv_weights[key]` keeps the device-prepared weights: the first (eager) call prepares them
    from `host_weights` (torch's (C, C, 3, 3) weight and (1, 1, 1, C) bias as host tensors),
    which writes to the device and so must happen before trace capture. With
    ``conv_weights[TAPS + key]`` set, the taps form runs instead (conv3x3_taps).
    """
    taps = conv_weights.get(TAPS + key)
    if taps is not None:
        return conv3x3_taps(ttnn, x, taps, channels, batch, side, settings)
    weight, bias = conv_weights.get(key, host_weights)
    out, prepared = ttnn.conv2d(
        input_tensor=x,
        weight_tensor=weight,
        bias_tensor=bias,
        device=device,
        in_channels=channels,
        out_channels=channels,
        batch_size=batch,
        input_height=side,
        input_width=side,
        kernel_size=(3, 3),
        stride=(1, 1),
        padding=(1, 1),
        dtype=ttnn.bfloat16,
        conv_config=ttnn.Conv2dConfig(weights_dtype=conv_dtype, output_layout=ttnn.TILE_LAYOUT),
        compute_config=settings.matmul_kernel,
        memory_config=settings.memory,
        return_weights_and_bias=True,
    )
    conv_weights[key] = prepared
    return out


def conv3x3_taps(
    ttnn: Any,
    x: Any,
    taps: tuple[Any, Any],
    channels: int,
    batch: int,
    side: int,
    settings: DeviceSettings,
) -> Any:
    """The same convolution as conv3x3 without ttnn.conv2d: x padded by one zero pixel on each
    side (ROW_MAJOR NHWC), its nine shifted (side, side) windows concatenated along the channels
    in (dy, dx) order, and one matmul with the (9C, C) tap weights plus the bias (`taps`: the
    device copies of tap_weights). (1, 1, batch*side^2, C) TILE in and out; leaves x allocated.

    Nine times the input's bytes pass through DRAM: a fallback, not the fast form."""
    memory = settings.memory
    rows = ttnn.to_layout(x, ttnn.ROW_MAJOR_LAYOUT, memory_config=memory)
    image = ttnn.reshape(rows, (batch, side, side, channels))
    padded = ttnn.pad(image, [(0, 0), (1, 1), (1, 1), (0, 0)], 0.0, memory_config=memory)
    ttnn.deallocate(rows)
    windows = [
        ttnn.slice(padded, [0, dy, dx, 0], [batch, dy + side, dx + side, channels], memory_config=memory)
        for dy in range(3)
        for dx in range(3)
    ]
    ttnn.deallocate(padded)
    stacked = ttnn.concat(windows, dim=3, memory_config=memory)
    for window in windows:
        ttnn.deallocate(window)
    flat = ttnn.reshape(stacked, (1, 1, batch * side * side, 9 * channels))
    tiles = ttnn.to_layout(flat, ttnn.TILE_LAYOUT, memory_config=memory)
    ttnn.deallocate(stacked)
    weight, bias = taps
    out = ttnn.linear(
        tiles,
        weight,
        bias=bias,
        dtype=ttnn.bfloat16,
        memory_config=memory,
        compute_kernel_config=settings.matmul_kernel,
    )
    ttnn.deallocate(tiles)
    return out
