"""Shapes of the prompt path's transformer layers (fusion encoder, decoder), read from the modules.

The epsilon is read from the LayerNorm modules, not from the sub-config: transformers builds
these norms as ``nn.LayerNorm(hidden_size)``, so they use torch's default 1e-5 whatever the
config's ``layer_norm_eps`` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tt_sam3_ros.engines.ttnn_model.attention import AttentionShape
from tt_sam3_ros.engines.ttnn_model.config import TILE, round_up


@dataclass(frozen=True)
class PromptLayerConfig:
    """One Sam3DetrEncoderLayer or Sam3DetrDecoderLayer as the device code needs it.

    Attributes:
        hidden: width C (256).
        intermediate: MLP width (2048).
        attention: the head layout (8 heads of 32).
        eps: the LayerNorms' epsilon.
    """

    hidden: int
    intermediate: int
    attention: AttentionShape
    eps: float

    @classmethod
    def from_layer(cls, layer: Any) -> PromptLayerConfig:
        activation = layer.config.hidden_act
        if activation != "relu":
            raise ValueError(f"the device MLP implements relu, the model uses {activation}")
        norms = [m for m in layer.modules() if m.__class__.__name__ == "LayerNorm"]
        if len({m.eps for m in norms}) != 1:
            raise ValueError("the layer's LayerNorms use different epsilons")
        attention = layer.self_attn
        return cls(
            hidden=attention.hidden_size,
            intermediate=layer.mlp.fc1.out_features,
            attention=AttentionShape.of(attention.hidden_size, attention.num_attention_heads),
            eps=norms[0].eps,
        )


def padded_length(tokens: int) -> int:
    """A sequence length rounded up to a tile (33 prompt tokens -> 64, 201 queries -> 224)."""
    return round_up(tokens, TILE)
