"""transformers' Sam3DetrEncoderLayer (the fusion encoder) in TT-NN ops.

One layer, pre-norm: image tokens attend to themselves (queries and keys carry the sine
position encoding, values do not: the position's share of the projections is folded into the
weights, prompt_weights.prepare_positioned_self_attention), then to the prompt tokens, then an
MLP, each with a residual.

Shapes (bfloat16, TILE, DRAM interleaved; B = prompts in the batch):
    vision   (B, S, C)  image tokens (S = 72 * 72 = 5184 for SAM 3: 162 tiles).
    prompt   (B, T, C)  prompt tokens padded to a tile (T = 64 for 32 text tokens + the
                        geometry encoder's class token).
    mask     (B, 1, S, T) additive key mask (attention.key_padding_mask): 0 for a real prompt
                        token, attention.MASKED for text padding and tile padding.
Weights: prompt_weights.prepare_fusion_encoder_layer, uploaded with weights.upload.
"""

from __future__ import annotations

from typing import Any

from tt_sam3_ros.engines.ttnn_model.attention import (
    multi_head_attention,
    positioned_self_attention,
    sub_weights,
)
from tt_sam3_ros.engines.ttnn_model.config import DeviceSettings
from tt_sam3_ros.engines.ttnn_model.layers import layer_norm, linear
from tt_sam3_ros.engines.ttnn_model.prompt_config import PromptLayerConfig


def mlp(ttnn: Any, x: Any, w: dict[str, Any], settings: DeviceSettings, hidden_dtype: Any = None) -> Any:
    """Sam3MLP: fc2(relu(fc1(x))), the bias and relu fused into the first matmul (its program
    config, layers.matmul_program), its output in `hidden_dtype` (bfloat16 by default); leaves x
    allocated."""
    expanded = linear(ttnn, x, w, "mlp.fc1", settings, activation="relu", dtype=hidden_dtype, fused=True)
    out = linear(ttnn, expanded, w, "mlp.fc2", settings)
    ttnn.deallocate(expanded)
    return out


def _residual(ttnn: Any, x: Any, update: Any, settings: DeviceSettings) -> Any:
    """x + update; consumes both."""
    out = ttnn.add(x, update, memory_config=settings.memory)
    ttnn.deallocate(x)
    ttnn.deallocate(update)
    return out


def _per_prompt(ttnn: Any, hidden: Any, batch: int, settings: DeviceSettings) -> Any:
    """(1, S, C) -> (batch, S, C), one copy per prompt; consumes `hidden` (returned as it is for
    one prompt: ttnn.repeat by ones would return its input, not a copy)."""
    if batch == 1:
        return hidden
    out = ttnn.repeat(hidden, (batch, 1, 1), memory_config=settings.memory)
    ttnn.deallocate(hidden)
    return out


def fusion_encoder_layer(
    ttnn: Any,
    vision: Any,
    prompt: Any,
    mask: Any,
    w: dict[str, Any],
    config: PromptLayerConfig,
    settings: DeviceSettings,
    shared: bool = False,
) -> Any:
    """Sam3DetrEncoderLayer: returns the updated (B, S, C) image tokens of the B prompts in `prompt`.

    `vision` is (B, S, C), consumed; or, with `shared`, the image's (1, S, C) tokens for all B
    prompts, left allocated (the image trace's buffer): the self-attention reads no prompt, so it
    runs once and its output is repeated to the prompts (the stack's first layer: its input is
    the same image for every prompt). `prompt` and `mask` stay allocated (every layer reads them).
    """
    normed = layer_norm(ttnn, vision, w, "ln1", config.eps, settings)
    attended = positioned_self_attention(
        ttnn, normed, sub_weights(w, "self_attn."), config.attention, settings
    )
    ttnn.deallocate(normed)
    if shared:
        hidden = ttnn.add(vision, attended, memory_config=settings.memory)
        ttnn.deallocate(attended)
        hidden = _per_prompt(ttnn, hidden, prompt.shape[0], settings)
    else:
        hidden = _residual(ttnn, vision, attended, settings)

    normed = layer_norm(ttnn, hidden, w, "ln2", config.eps, settings)
    attended = multi_head_attention(
        ttnn, normed, prompt, prompt, sub_weights(w, "cross_attn."), config.attention, settings, mask
    )
    ttnn.deallocate(normed)
    hidden = _residual(ttnn, hidden, attended, settings)

    normed = layer_norm(ttnn, hidden, w, "ln3", config.eps, settings)
    expanded = mlp(ttnn, normed, w, settings, settings.fusion_mlp_hidden)
    ttnn.deallocate(normed)
    return _residual(ttnn, hidden, expanded, settings)


def fusion_encoder(
    ttnn: Any,
    tokens: Any,
    prompt: Any,
    mask: Any,
    weights: dict[str, Any],
    config: PromptLayerConfig,
    settings: DeviceSettings,
    layers: int,
) -> Any:
    """Sam3DetrEncoder's layer stack: `layers` fusion_encoder_layer calls on the weights under
    "layers.{i}." (prompt_weights.prepare_fusion_encoder), from the image's (1, S, C) `tokens`
    (left allocated: the first layer shares them among the prompts) to (B, S, C)."""
    vision = tokens
    for index in range(layers):
        layer_weights = sub_weights(weights, f"layers.{index}.")
        vision = fusion_encoder_layer(
            ttnn, vision, prompt, mask, layer_weights, config, settings, shared=index == 0
        )
    return vision
