"""The constants of Meta's SAM 3 code, applied wherever transformers' defaults or a config.json differ.

Every SAM 3 checkpoint comes from Meta's training code (facebookresearch/sam3), so the weights are
right only with the numbers that code uses; transformers' ``Sam3Config`` (and the hub's config.json,
which its converter writes from ``Sam3Config()``) differs in one of them, and a config.json that
leaves out the text activation gets CLIP's in another. Checked against Meta's ``sam3/model`` and
transformers 5.17's ``modeling_sam3.py`` / ``configuration_sam3.py`` / ``modeling_clip.py``:

- ViT norms (ln_pre, each block's norm1/norm2): Meta builds them with eps 1e-5 (vitdet.py turns
  ``norm_layer="LayerNorm"`` into ``LayerNorm(eps=1e-5)``); ``Sam3ViTConfig.layer_norm_eps`` is
  1e-6 and transformers' layers read it. **Differs**: overridden.
- Text encoder norms (ln_1, ln_2, ln_final): torch's default 1e-5 in Meta's text_encoder_ve.py;
  CLIP's config default is also 1e-5. Enforced against a config.json that says otherwise.
- Activations: GELU (exact) in Meta's ViT MLP and text MLP. ``Sam3Config()`` says "gelu" for both,
  but ``CLIPTextConfig`` defaults to "quick_gelu", so a text_config without ``hidden_act`` **differs**:
  enforced.
- Geometry encoder, fusion (DETR) encoder and decoder, dot-product scoring, mask decoder: torch's
  default LayerNorm/GroupNorm eps 1e-5 in Meta's code and in transformers' modules, which ignore
  their configs' ``layer_norm_eps`` (1e-6). The configs are set to 1e-5 too, so anything that reads
  them (the ttnn engine reads the ViT's) gets the number the model runs with.
- Same in both, nothing to do: the neck (no norm; GELU between its transposed convolutions), RoPE
  theta 10000 and its window/global scaling, sine position encodings (eps 1e-6, scale 2 pi,
  temperature 10000), inverse_sigmoid eps 1e-3, the box log-scale bias (log2(8)), the scoring clamp
  at 12, the pixel decoder's nearest upsampling.
- One difference is code, not a constant, and stays: transformers clamps the presence logit to
  [-10, 10]; Meta's decoder calls ``clamp`` without keeping the result, so it never clamps. Scores
  differ only where a presence logit is beyond +-10, by at most 1 - sigmoid(10) = 4.6e-5.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import Sam3Config

#: LayerNorm / GroupNorm epsilon of every norm in Meta's SAM 3 image model.
META_NORM_EPS = 1e-5
#: The activation of Meta's ViT MLP and text MLP (nn.GELU, exact).
META_ACTIVATION = "gelu"

#: (sub-config path, field, Meta's value, whether transformers' modules read the field).
_META_VALUES: tuple[tuple[str, str, object, bool], ...] = (
    ("vision_config.backbone_config", "layer_norm_eps", META_NORM_EPS, True),
    ("vision_config.backbone_config", "hidden_act", META_ACTIVATION, True),
    ("text_config", "layer_norm_eps", META_NORM_EPS, True),
    ("text_config", "hidden_act", META_ACTIVATION, True),
    ("geometry_encoder_config", "layer_norm_eps", META_NORM_EPS, False),
    ("detr_encoder_config", "layer_norm_eps", META_NORM_EPS, False),
    ("detr_decoder_config", "layer_norm_eps", META_NORM_EPS, False),
    ("mask_decoder_config", "layer_norm_eps", META_NORM_EPS, False),
)


def apply_meta_constants(config: Sam3Config) -> list[str]:
    """Set Meta's values on ``config`` in place (build the model after); returns what changed.

    Each entry reads "path.field old -> new", for the caller to log once per load. Fields that
    transformers' modules ignore are set too, so the config tells the truth, but not reported:
    changing them changes nothing the model computes.
    """
    changes = []
    for path, field, value, read in _META_VALUES:
        holder = config
        for part in path.split("."):
            holder = getattr(holder, part)
        old = getattr(holder, field)
        if old != value:
            setattr(holder, field, value)
            if read:
                changes.append(f"{path}.{field} {old!r} -> {value!r}")
    return changes
