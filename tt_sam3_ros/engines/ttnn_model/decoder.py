"""transformers' Sam3DetrDecoderLayer (one DETR decoder layer) in TT-NN ops.

Post-norm: the queries attend to themselves, to the prompt tokens, then to the image tokens
with the box relative-position bias, then an MLP; each step is LayerNorm(x + step(x)), one fused
ttnn.layer_norm with ``residual_input_tensor``. Queries carry their position embedding in every
attention; image keys carry the image's sine position encoding.

Query rows: the presence token at row 0, the 200 queries at rows 1..200, zero rows after them up
to a tile multiple (224). The padded rows are never keys (``self_mask`` masks them) and their
own values are thrown away, so they change nothing in the real rows.

Shapes (bfloat16, TILE, DRAM interleaved; B = prompts in the batch):
    hidden       (B, Q, C)  Q = padded_length(1 + queries) = 224.
    query_pos    (B, Q, C)  ref_point_head's output at rows 1..200, zero at row 0 and padding.
    self_mask    (1, 1, Q, Q) key_padding_mask over the 1 + queries real rows.
    text         (B, T, C)  prompt tokens padded to a tile (T = 64).
    text_mask    (B, 1, Q, T) key_padding_mask of the prompt tokens.
    vision       (B, S, C)  the fusion encoder's image tokens (values).
    vision_keyed (B, S, C)  vision + the sine position encoding: the keys, the same for all six
                 layers, so the caller adds them once per image and prompt set.
    box_bias     (B, H, Q, S) the box relative-position bias (row 0 and padded rows zero), an
                 additive SDPA mask: per head, as the kernel's mask broadcast allows.
Weights: prompt_weights.prepare_decoder_layer, uploaded with weights.upload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .attention import multi_head_attention, sub_weights
from .config import DeviceSettings
from .fusion_encoder import mlp
from .prompt_config import PromptLayerConfig


@dataclass
class DecoderInputs:
    """The device tensors one decoder layer reads besides its hidden state (see the module doc)."""

    query_pos: Any
    self_mask: Any
    text: Any
    text_mask: Any
    vision: Any
    vision_keyed: Any
    box_bias: Any


def _add_norm(
    ttnn: Any,
    x: Any,
    update: Any,
    w: dict[str, Any],
    name: str,
    config: PromptLayerConfig,
    settings: DeviceSettings,
) -> Any:
    """LayerNorm(x + update) in one op; consumes both."""
    out = ttnn.layer_norm(
        x,
        epsilon=config.eps,
        weight=w[f"{name}.weight"],
        bias=w[f"{name}.bias"],
        residual_input_tensor=update,
        memory_config=settings.memory,
        compute_kernel_config=settings.exact_kernel,
    )
    ttnn.deallocate(x)
    ttnn.deallocate(update)
    return out


def _attend(
    ttnn: Any,
    hidden: Any,
    keys: Any,
    values: Any,
    inputs: DecoderInputs,
    w: dict[str, Any],
    name: str,
    mask: Any,
    config: PromptLayerConfig,
    settings: DeviceSettings,
) -> Any:
    """LayerNorm(hidden + attention(hidden + query_pos, keys, values)); consumes hidden.

    `keys` None means self-attention: keys are the queries with their position, values hidden.
    """
    positioned = ttnn.add(hidden, inputs.query_pos, memory_config=settings.memory)
    keys = positioned if keys is None else keys
    values = hidden if values is None else values
    attended = multi_head_attention(
        ttnn, positioned, keys, values, sub_weights(w, f"{name}."), config.attention, settings, mask
    )
    ttnn.deallocate(positioned)
    return _add_norm(ttnn, hidden, attended, w, f"{name}_norm", config, settings)


def decoder_layer(
    ttnn: Any,
    hidden: Any,
    inputs: DecoderInputs,
    w: dict[str, Any],
    config: PromptLayerConfig,
    settings: DeviceSettings,
) -> Any:
    """Sam3DetrDecoderLayer: consumes `hidden`, returns the updated (B, Q, C) query rows."""
    hidden = _attend(ttnn, hidden, None, None, inputs, w, "self_attn", inputs.self_mask, config, settings)
    hidden = _attend(
        ttnn, hidden, inputs.text, inputs.text, inputs, w, "text_attn", inputs.text_mask, config, settings
    )
    hidden = _attend(
        ttnn,
        hidden,
        inputs.vision_keyed,
        inputs.vision,
        inputs,
        w,
        "vision_attn",
        inputs.box_bias,
        config,
        settings,
    )
    expanded = mlp(ttnn, hidden, w, settings)
    return _add_norm(ttnn, hidden, expanded, w, "mlp_norm", config, settings)
