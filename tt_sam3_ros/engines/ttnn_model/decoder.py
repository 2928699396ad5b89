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

The whole Sam3DetrDecoder (``decoder_stack``) adds the glue between layers, all on the device.
Boxes are (B, Q, 32) float32 rows: cx, cy, w, h in columns 0..3 (normalised, sigmoid space),
the other columns padding that the weights ignore (box_delta says why float32). The state
carried from layer to layer is the box logits u, clamped: transformers'
inverse_sigmoid(sigmoid(u)) with eps 1e-3 is clamp(u, -ln(999), ln(999)) within 1e-3, and a
sigmoid followed by a log of 1 - x would lose bits near the clamp, so neither a log nor a
reciprocal is needed. Per layer:
    boxes      sigmoid(u)                                      (1 or B, Q, 32)
    query_pos  ref_point_head(sin(boxes @ F + phase))          (sine embedding as one matmul:
               F holds each feature's frequency, phase pi/2 turns sin into cos; rows 0 and
               padding zeroed, as the presence token has no position)
    box_bias   the box relative-position bias from these boxes (``box_bias``)
    hidden     decoder_layer(...)
    queries    output_norm(hidden)                             (transformers' intermediate output)
    u          box_head(queries) + clamp(u)                    (the refinement)
    boxes'     sigmoid(u): the layer's predicted boxes, as Sam3Model's pred_boxes (cxcywh).
Weights of the stack: prompt_weights.prepare_decoder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tt_sam3_ros.engines.ttnn_model.attention import multi_head_attention, sub_weights
from tt_sam3_ros.engines.ttnn_model.config import TILE, DeviceSettings, round_up
from tt_sam3_ros.engines.ttnn_model.fusion_encoder import mlp
from tt_sam3_ros.engines.ttnn_model.layers import decoder_mlp, layer_norm
from tt_sam3_ros.engines.ttnn_model.prompt_config import PromptLayerConfig, padded_length
from tt_sam3_ros.engines.ttnn_model.scoring import ScoringConfig, presence_logits

#: transformers' inverse_sigmoid epsilon; the logits the stack carries are clamped to +-ln(1/eps - 1).
INVERSE_SIGMOID_EPS = 1e-3
#: The box bias encodes 8 * (grid - edge) as sign * log2(1 + |.|) / log2(8) (transformers'
#: _get_rpb_matrix); the 8 is folded into the edge matrix, 1 / ln 8 into the first MLP layer.
RPB_SCALE = 8.0


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


# the stack ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecoderStackConfig:
    """Sam3DetrDecoder's shape as the device code needs it.

    Attributes:
        layer: one decoder layer's shape.
        layers: decoder layers (6).
        queries: object queries N (200); rows = padded_length(1 + N) (224).
        height, width: the image-token grid the box bias spans (72 x 72).
        positions: height and width each padded to a tile (96): the box bias's first MLP runs
            on (query, axis, position) rows, 2 * positions per query.
        eps: the output LayerNorm's epsilon.
    """

    layer: PromptLayerConfig
    layers: int
    queries: int
    height: int
    width: int
    eps: float

    @classmethod
    def from_decoder(cls, decoder: Any, height: int, width: int) -> DecoderStackConfig:
        return cls(
            layer=PromptLayerConfig.from_layer(decoder.layers[0]),
            layers=len(decoder.layers),
            queries=decoder.config.num_queries,
            height=height,
            width=width,
            eps=decoder.output_layer_norm.eps,
        )

    @property
    def rows(self) -> int:
        return padded_length(1 + self.queries)

    @property
    def positions(self) -> int:
        return round_up(max(self.height, self.width), TILE)

    @property
    def logit_limit(self) -> float:
        return math.log(1.0 / INVERSE_SIGMOID_EPS - 1.0)


@dataclass
class DecoderStackInputs:
    """What the stack reads per image and prompt set (see the module doc for the shapes); it
    leaves them allocated."""

    text: Any
    text_mask: Any
    vision: Any
    vision_keyed: Any


@dataclass
class DecoderStackOutputs:
    """The stack's results; the caller deallocates them.

    Attributes:
        hidden: the last layer's output (B, Q, C), before any norm (scoring.query_logits and
            scoring.presence_logits norm it themselves).
        queries: each layer's output_norm(hidden) (transformers' intermediate_hidden_states).
        boxes: each layer's refined boxes (B, Q, 32) float32, cx, cy, w, h in columns 0..3.
        presence: each layer's clamped presence logits (B, Q, 1), row 0 the token's; only when
            decoder_stack was given a ScoringConfig.
    """

    hidden: Any = None
    queries: list[Any] = field(default_factory=list)
    boxes: list[Any] = field(default_factory=list)
    presence: list[Any] = field(default_factory=list)


def query_position(ttnn: Any, boxes: Any, w: dict[str, Any], settings: DeviceSettings) -> Any:
    """ref_point_head(encode_boxes(boxes)) on every row, zeroed outside the query rows.

    The sine embedding is one exact (HiFi4, bfloat16 weights) matmul with the frequency matrix
    and the phase row as its bias, then one sin: the angles reach 2 pi, so a truncated operand
    would move them by more than the bfloat16 output's own rounding.
    """
    angles = ttnn.linear(
        boxes,
        w["sine.weight"],
        bias=w["sine.bias"],
        dtype=ttnn.bfloat16,
        memory_config=settings.memory,
        compute_kernel_config=settings.exact_kernel,
    )
    sine = ttnn.sin(angles, memory_config=settings.memory)
    ttnn.deallocate(angles)
    position = decoder_mlp(ttnn, sine, w, "ref_point_head", 2, settings)
    ttnn.deallocate(sine)
    out = ttnn.mul(position, w["query_rows"], memory_config=settings.memory)
    ttnn.deallocate(position)
    return out


def box_bias(
    ttnn: Any, boxes: Any, w: dict[str, Any], config: DecoderStackConfig, settings: DeviceSettings
) -> Any:
    """transformers' _get_rpb_matrix from the current boxes: (B, H, Q, height * width), zero on
    the presence row and the padding rows, an additive SDPA mask (DRAM, TILE).

    1. One exact matmul with the edge matrix, relu fused: per query, for each axis and grid
       position p and each box edge e, the two halves relu(+-8 (p / size - e)) in a 32-wide
       group (sign(d) log(1 + |d|) = log1p(relu(d)) - log1p(relu(-d)): no sign or abs op).
    2. log1p, then a reshape to (B, Q * 2 * positions, 32) rows (a copy).
    3. box_rpb_embed_y and _x as one 2-layer MLP (its hidden layer in settings.box_bias_hidden):
       the first layer's weights are block-diagonal
       (y rows read the y columns, x rows the x columns; the signs and 1 / ln 8 folded in), and
       the second layer's bias makes the y row's plus the x row's constants sum to transformers'.
    4. A view to (B, Q, 2 * positions, H), a permute to (B, H, Q, 2 * positions), the
       presence and padding rows zeroed, then the exact matmul with the 0/1 outer matrix:
       bias[., i * width + j] = y[i] + x[j].
    """
    batch, rows, heads = boxes.shape[0], config.rows, config.layer.attention.heads
    spans = 2 * config.positions
    halves = ttnn.linear(
        boxes,
        w["rpb.edges.weight"],
        bias=w["rpb.edges.bias"],
        activation="relu",
        dtype=ttnn.bfloat16,
        memory_config=settings.memory,
        compute_kernel_config=settings.exact_kernel,
    )
    logs = ttnn.log1p(halves, memory_config=settings.memory)
    ttnn.deallocate(halves)
    per_position = ttnn.reshape(logs, (batch, rows * spans, TILE))
    ttnn.deallocate(logs)
    embedded = decoder_mlp(ttnn, per_position, w, "rpb", 2, settings, hidden_dtype=settings.box_bias_hidden)
    ttnn.deallocate(per_position)
    grid = ttnn.reshape(embedded, (batch, rows, spans, heads))
    by_head = ttnn.permute(grid, (0, 3, 1, 2), memory_config=settings.memory)
    ttnn.deallocate(embedded)
    kept = ttnn.mul(by_head, w["rpb.rows"], memory_config=settings.memory)
    ttnn.deallocate(by_head)
    out = ttnn.matmul(
        kept, w["rpb.outer"], memory_config=settings.memory, compute_kernel_config=settings.exact_kernel
    )
    ttnn.deallocate(kept)
    return out


def box_delta(ttnn: Any, queries: Any, w: dict[str, Any], settings: DeviceSettings) -> Any:
    """box_head(queries): (B, Q, 32) float32 box-logit updates (columns 4.. zero).

    The box state stays float32 from here on (the logits, their clamp, the sigmoid): bfloat16
    boxes near 1 step by 2^-8, 4 pixels of a 1008-pixel image, more than the model's own
    refinement in the later layers.
    """
    hidden = decoder_mlp(ttnn, queries, w, "box_head", 2, settings, last_activation="relu")
    out = ttnn.linear(
        hidden,
        w["box_head.layer3.weight"],
        bias=w["box_head.layer3.bias"],
        dtype=ttnn.float32,
        memory_config=settings.memory,
        compute_kernel_config=settings.matmul_kernel,
    )
    ttnn.deallocate(hidden)
    return out


def _initial_hidden(ttnn: Any, w: dict[str, Any], batch: int, settings: DeviceSettings) -> Any:
    """The presence token and the query embeddings, one copy per prompt: a new tensor, since the
    first layer consumes it (ttnn.repeat by ones would return the weight itself)."""
    if batch == 1:
        return ttnn.add(w["hidden.initial"], 0.0, memory_config=settings.memory)
    return ttnn.repeat(w["hidden.initial"], (batch, 1, 1), memory_config=settings.memory)


def decoder_stack(
    ttnn: Any,
    inputs: DecoderStackInputs,
    w: dict[str, Any],
    config: DecoderStackConfig,
    settings: DeviceSettings,
    presence: ScoringConfig | None = None,
    all_layers: bool = True,
) -> DecoderStackOutputs:
    """Sam3DetrDecoder: config.layers decoder layers with the glue between them (module doc).

    `w` is prepare_decoder's upload; `presence` (scoring's config) adds each layer's presence
    logits to the outputs, as transformers returns them (the engine needs only the last, which
    scoring.presence_logits(outputs.hidden) gives). `all_layers` False keeps only the last
    layer's queries, boxes and presence (lists of one), freeing the others as it goes.
    """
    batch, limit = inputs.text.shape[0], config.logit_limit
    hidden = _initial_hidden(ttnn, w, batch, settings)
    logits = ttnn.clamp(w["boxes.initial"], -limit, limit, memory_config=settings.memory)
    boxes = ttnn.sigmoid(logits, memory_config=settings.memory)
    outputs = DecoderStackOutputs()
    for index in range(config.layers):
        last = index == config.layers - 1
        layer_inputs = DecoderInputs(
            query_pos=query_position(ttnn, boxes, w, settings),
            self_mask=w["self_mask"],
            text=inputs.text,
            text_mask=inputs.text_mask,
            vision=inputs.vision,
            vision_keyed=inputs.vision_keyed,
            box_bias=box_bias(ttnn, boxes, w, config, settings),
        )
        if index == 0 or not all_layers:
            ttnn.deallocate(boxes)  # the initial boxes, or an earlier layer's nobody keeps
        hidden = decoder_layer(
            ttnn, hidden, layer_inputs, sub_weights(w, f"layers.{index}."), config.layer, settings
        )
        ttnn.deallocate(layer_inputs.query_pos)
        ttnn.deallocate(layer_inputs.box_bias)
        queries = layer_norm(ttnn, hidden, w, "output_norm", config.eps, settings)
        delta = box_delta(ttnn, queries, w, settings)
        refined = ttnn.add(delta, logits, memory_config=settings.memory)
        ttnn.deallocate(delta)
        ttnn.deallocate(logits)
        boxes = ttnn.sigmoid(refined, memory_config=settings.memory)
        if not last:
            logits = ttnn.clamp(refined, -limit, limit, memory_config=settings.memory)
        ttnn.deallocate(refined)
        if not (all_layers or last):
            ttnn.deallocate(queries)
            continue
        outputs.queries.append(queries)
        outputs.boxes.append(boxes)
        if presence is not None:
            outputs.presence.append(presence_logits(ttnn, hidden, w, presence, settings))
    outputs.hidden = hidden
    return outputs
