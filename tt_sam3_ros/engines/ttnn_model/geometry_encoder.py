"""The geometry encoder's class token in TT-NN ops: what transformers' Sam3GeometryEncoder gives a
text-only prompt, computed once per image (it belongs in the image trace).

Meta's model always runs the geometry encoder and appends its output to the prompt tokens; the
torch engine makes transformers do the same with one padded box (mask False, label 0). What of
that reaches the output, read off Sam3GeometryEncoder.forward:
- the box's embedding (direct projection, ROI-aligned pooling of the layer-normed image, its
  position encoding, its label) is built and then overwritten: ``concat_padded_sequences`` puts
  the class token at the first free position, which with zero valid boxes is position 0, over
  the box. Position 1 is zeros and stays masked (as a key here, and in every later consumer:
  the torch engine passes the mask [True, False] on). So no ROI align, no box term and no
  ``vision_layer_norm`` reach the class token, and the token depends only on the image;
- the sequence then starts as prompt_layer_norm(final_proj(cls_embed)): image-independent, so
  prompt_weights.prepare_geometry_encoder computes it once on the host, in float32 ("start");
- each of the 3 layers (pre-norm): self-attention over one valid key is exactly
  o_proj(v_proj(LayerNorm(x))) (softmax over a single key is 1), so q and k are not needed;
  cross-attention to the image tokens of the 1x FPN level (keys carry the level's sine position
  encoding, values do not); an MLP; each with a residual;
- output_layer_norm.

Shapes (bfloat16, TILE, DRAM interleaved):
    vision   (1, 1, S, C) the neck's scale-1 map (S = 72 * 72), row-major pixels; left allocated.
    returns  (1, 32, C)   one tile of rows: row 0 is the class token, rows 1..31 are padding
                          (finite, to be masked as keys). It is meant to be the second tile of a
                          prompt's tokens: 32 text tokens, then this tile, T = 64.
Weights: prompt_weights.prepare_geometry_encoder ("start", "position" (1, S, C), per layer
"layers.{i}.", "output_norm."), uploaded with weights.upload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tt_sam3_ros.engines.ttnn_model.attention import AttentionShape, multi_head_attention, sub_weights
from tt_sam3_ros.engines.ttnn_model.config import TILE, DeviceSettings
from tt_sam3_ros.engines.ttnn_model.fusion_encoder import mlp
from tt_sam3_ros.engines.ttnn_model.layers import layer_norm, linear

#: Rows of the class-token tile: the token itself and tile padding.
ROWS = TILE


@dataclass(frozen=True)
class GeometryConfig:
    """Sam3GeometryEncoder as the device code needs it.

    Attributes:
        hidden: width C (256).
        intermediate: MLP width (2048).
        attention: the head layout (8 heads of 32).
        layers: transformer layers (3).
        eps: the LayerNorms' epsilon (torch's default: the modules are nn.LayerNorm(C)).
    """

    hidden: int
    intermediate: int
    attention: AttentionShape
    layers: int
    eps: float

    @classmethod
    def from_module(cls, encoder: Any) -> GeometryConfig:
        if encoder.config.hidden_act != "relu":
            raise ValueError(f"the device MLP implements relu, the model uses {encoder.config.hidden_act}")
        norms = [m for m in encoder.modules() if m.__class__.__name__ == "LayerNorm"]
        if len({m.eps for m in norms}) != 1:
            raise ValueError("the geometry encoder's LayerNorms use different epsilons")
        attention = encoder.layers[0].cross_attn
        return cls(
            hidden=encoder.hidden_size,
            intermediate=encoder.layers[0].mlp.fc1.out_features,
            attention=AttentionShape.of(attention.hidden_size, attention.num_attention_heads),
            layers=len(encoder.layers),
            eps=norms[0].eps,
        )


def _add(ttnn: Any, x: Any, update: Any, settings: DeviceSettings, keep_x: bool = False) -> Any:
    """x + update; consumes update, and x unless `keep_x` (the start token is a weight)."""
    out = ttnn.add(x, update, memory_config=settings.memory)
    if not keep_x:
        ttnn.deallocate(x)
    ttnn.deallocate(update)
    return out


def geometry_layer(
    ttnn: Any,
    hidden: Any,
    vision: Any,
    keyed: Any,
    w: dict[str, Any],
    config: GeometryConfig,
    settings: DeviceSettings,
    keep_hidden: bool = False,
) -> Any:
    """Sam3GeometryEncoderLayer on the class-token tile; consumes `hidden` unless `keep_hidden`.

    `vision` (1, S, C) are the cross-attention's values, `keyed` (vision + position) its keys.
    """
    normed = layer_norm(ttnn, hidden, w, "ln1", config.eps, settings)
    values = linear(ttnn, normed, w, "self_attn.v", settings)
    ttnn.deallocate(normed)
    attended = linear(ttnn, values, w, "self_attn.o", settings)
    ttnn.deallocate(values)
    hidden = _add(ttnn, hidden, attended, settings, keep_x=keep_hidden)

    normed = layer_norm(ttnn, hidden, w, "ln2", config.eps, settings)
    attended = multi_head_attention(
        ttnn, normed, keyed, vision, sub_weights(w, "cross_attn."), config.attention, settings
    )
    ttnn.deallocate(normed)
    hidden = _add(ttnn, hidden, attended, settings)

    normed = layer_norm(ttnn, hidden, w, "ln3", config.eps, settings)
    expanded = mlp(ttnn, normed, w, settings)
    ttnn.deallocate(normed)
    return _add(ttnn, hidden, expanded, settings)


def class_token(
    ttnn: Any, vision: Any, w: dict[str, Any], config: GeometryConfig, settings: DeviceSettings
) -> Any:
    """The geometry encoder's output for a text-only prompt: (1, 32, C), row 0 the class token.

    `vision` is the neck's scale-1 map (1, 1, S, C); it stays allocated.
    """
    tokens = vision.shape[-2]
    flat = ttnn.reshape(vision, (1, tokens, config.hidden))  # a view: same last dim, whole tiles
    keyed = ttnn.add(flat, w["position"], memory_config=settings.memory)
    hidden = w["start"]
    for index in range(config.layers):
        hidden = geometry_layer(
            ttnn,
            hidden,
            flat,
            keyed,
            sub_weights(w, f"layers.{index}."),
            config,
            settings,
            keep_hidden=index == 0,
        )
    ttnn.deallocate(keyed)
    out = layer_norm(ttnn, hidden, w, "output_norm", config.eps, settings)
    ttnn.deallocate(hidden)
    return out
