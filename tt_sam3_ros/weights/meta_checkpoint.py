"""Meta's original checkpoint (sam3.pt): reading it, and its key mapping to transformers' layout.

``convert_meta_state_dict`` turns Meta's state dict into transformers' ``Sam3Model`` one;
its inverse (``to_meta_state_dict``) exists so the tests can fabricate a Meta-format
checkpoint from the tiny model and prove the round trip. The mapping's facts (names, fused
q/k/v projections, the transposed CLIP projection, the class-token row of the ViT position
table) were read from transformers' ``convert_sam3_to_hf.py`` and Meta's ``sam3`` model code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tt_sam3_ros.weights.errors import WeightsError, corrupt
from tt_sam3_ros.weights.integrity import safetensors_header
from tt_sam3_ros.weights.release import (
    DEFAULT_MODEL_ID,
    META_CHECKPOINT_NAME,
    SAM3_PINNED_REVISION,
    SAM3_PT_PUBLISHED_BYTES,
)

if TYPE_CHECKING:
    import torch
    from transformers import Sam3Config


@dataclass(frozen=True)
class _Rule:
    """One module of transformers' Sam3Model and where Meta keeps it.

    ``hf`` is a regex for the key prefix (named group ``n`` for a layer index); ``meta`` the
    Meta prefix, formatted with the same groups; ``aliases`` older Meta names accepted on
    load. ``attention`` says how the module's q/k/v projections are fused in Meta's model:
    "vit" (one ``qkv`` Linear, output ``proj``) or "mha" (torch MultiheadAttention's
    ``in_proj_weight``, output ``out_proj``).
    """

    hf: str
    meta: str
    aliases: tuple[str, ...] = ()
    attention: Literal["vit", "mha"] | None = None


_N = r"(?P<n>\d+)"
_VIT = "backbone.vision_backbone.trunk."
_TEXT = "backbone.language_backbone.encoder."
_ENC = "transformer.encoder.layers.{n}."
_DEC = "transformer.decoder."


def _mlp_layers(hf: str, meta: str, count: int) -> list[_Rule]:
    """transformers names MLP layers layer1..layerK; Meta keeps them in a list, layers.0..K-1."""
    return [_Rule(rf"{hf}\.layer{k}\.", f"{meta}.layers.{k - 1}.") for k in range(1, count + 1)]


def _attention_block(hf: str, meta: str, hf_norms: dict[str, str]) -> list[_Rule]:
    """A DETR-style layer's feed-forward (linear1/linear2) and its norms, renamed."""
    rules = [_Rule(rf"{hf}\.mlp\.fc1\.", f"{meta}linear1."), _Rule(rf"{hf}\.mlp\.fc2\.", f"{meta}linear2.")]
    rules += [_Rule(rf"{hf}\.{name}\.", f"{meta}{target}.") for name, target in hf_norms.items()]
    return rules


_ENCODER_NORMS = {"layer_norm1": "norm1", "layer_norm2": "norm2", "layer_norm3": "norm3"}

#: transformers key prefix -> Meta key prefix, most specific first.
_RULES: tuple[_Rule, ...] = (
    # Vision trunk (ViT-L+ with windowed attention and RoPE).
    _Rule(
        r"vision_encoder\.backbone\.embeddings\.patch_embeddings\.projection\.", f"{_VIT}patch_embed.proj."
    ),
    _Rule(r"vision_encoder\.backbone\.layer_norm\.", f"{_VIT}ln_pre."),
    _Rule(rf"vision_encoder\.backbone\.layers\.{_N}\.layer_norm1\.", _VIT + "blocks.{n}.norm1."),
    _Rule(rf"vision_encoder\.backbone\.layers\.{_N}\.layer_norm2\.", _VIT + "blocks.{n}.norm2."),
    _Rule(
        rf"vision_encoder\.backbone\.layers\.{_N}\.attention\.", _VIT + "blocks.{n}.attn.", attention="vit"
    ),
    _Rule(rf"vision_encoder\.backbone\.layers\.{_N}\.mlp\.", _VIT + "blocks.{n}.mlp."),
    # Neck: 1x1 and 3x3 projections (the scale convolutions are named per level, below).
    _Rule(
        rf"vision_encoder\.neck\.fpn_layers\.{_N}\.proj1\.", "backbone.vision_backbone.convs.{n}.conv_1x1."
    ),
    _Rule(
        rf"vision_encoder\.neck\.fpn_layers\.{_N}\.proj2\.", "backbone.vision_backbone.convs.{n}.conv_3x3."
    ),
    # Text encoder (CLIP) and the projection to the detector's width.
    _Rule(r"text_encoder\.text_model\.embeddings\.token_embedding\.", f"{_TEXT}token_embedding."),
    _Rule(r"text_encoder\.text_model\.final_layer_norm\.", f"{_TEXT}ln_final."),
    _Rule(
        rf"text_encoder\.text_model\.encoder\.layers\.{_N}\.self_attn\.",
        _TEXT + "transformer.resblocks.{n}.attn.",
        attention="mha",
    ),
    _Rule(
        rf"text_encoder\.text_model\.encoder\.layers\.{_N}\.layer_norm1\.",
        _TEXT + "transformer.resblocks.{n}.ln_1.",
    ),
    _Rule(
        rf"text_encoder\.text_model\.encoder\.layers\.{_N}\.layer_norm2\.",
        _TEXT + "transformer.resblocks.{n}.ln_2.",
    ),
    _Rule(
        rf"text_encoder\.text_model\.encoder\.layers\.{_N}\.mlp\.fc1\.",
        _TEXT + "transformer.resblocks.{n}.mlp.c_fc.",
    ),
    _Rule(
        rf"text_encoder\.text_model\.encoder\.layers\.{_N}\.mlp\.fc2\.",
        _TEXT + "transformer.resblocks.{n}.mlp.c_proj.",
    ),
    _Rule(r"text_projection\.", "backbone.language_backbone.resizer."),
    # Geometry encoder (boxes; its CLS token is part of every text prompt in Meta's model).
    _Rule(
        rf"geometry_encoder\.layers\.{_N}\.cross_attn\.",
        "geometry_encoder.encode.{n}.cross_attn_image.",
        attention="mha",
    ),
    _Rule(
        rf"geometry_encoder\.layers\.{_N}\.self_attn\.",
        "geometry_encoder.encode.{n}.self_attn.",
        attention="mha",
    ),
    *_attention_block(rf"geometry_encoder\.layers\.{_N}", "geometry_encoder.encode.{n}.", _ENCODER_NORMS),
    _Rule(r"geometry_encoder\.vision_layer_norm\.", "geometry_encoder.img_pre_norm."),
    _Rule(r"geometry_encoder\.prompt_layer_norm\.", "geometry_encoder.norm."),
    _Rule(r"geometry_encoder\.output_layer_norm\.", "geometry_encoder.encode_norm."),
    _Rule(
        r"geometry_encoder\.(?P<name>label_embed|cls_embed|boxes_direct_project|boxes_pool_project"
        r"|boxes_pos_enc_project|final_proj)\.",
        "geometry_encoder.{name}.",
    ),
    # Fusion (DETR) encoder.
    _Rule(
        rf"detr_encoder\.layers\.{_N}\.cross_attn\.",
        _ENC + "cross_attn_image.",
        aliases=(_ENC + "cross_attn.",),
        attention="mha",
    ),
    _Rule(rf"detr_encoder\.layers\.{_N}\.self_attn\.", _ENC + "self_attn.", attention="mha"),
    *_attention_block(rf"detr_encoder\.layers\.{_N}", _ENC, _ENCODER_NORMS),
    # DETR decoder with box refinement and the presence token.
    _Rule(rf"detr_decoder\.layers\.{_N}\.self_attn\.", _DEC + "layers.{n}.self_attn.", attention="mha"),
    _Rule(rf"detr_decoder\.layers\.{_N}\.text_cross_attn\.", _DEC + "layers.{n}.ca_text.", attention="mha"),
    _Rule(
        rf"detr_decoder\.layers\.{_N}\.vision_cross_attn\.", _DEC + "layers.{n}.cross_attn.", attention="mha"
    ),
    *_attention_block(
        rf"detr_decoder\.layers\.{_N}",
        _DEC + "layers.{n}.",
        {
            "vision_cross_attn_layer_norm": "norm1",
            "text_cross_attn_layer_norm": "catext_norm",
            "self_attn_layer_norm": "norm2",
            "mlp_layer_norm": "norm3",
        },
    ),
    _Rule(
        r"detr_decoder\.(?P<name>query_embed|reference_points|presence_token)\.",
        _DEC + "{name}.",
    ),
    _Rule(r"detr_decoder\.presence_layer_norm\.", f"{_DEC}presence_token_out_norm."),
    _Rule(r"detr_decoder\.output_layer_norm\.", f"{_DEC}norm."),
    *_mlp_layers(r"detr_decoder\.presence_head", f"{_DEC}presence_token_head", 3),
    *_mlp_layers(r"detr_decoder\.box_head", f"{_DEC}bbox_embed", 3),
    *_mlp_layers(r"detr_decoder\.ref_point_head", f"{_DEC}ref_point_head", 2),
    *_mlp_layers(r"detr_decoder\.box_rpb_embed_x", f"{_DEC}boxRPB_embed_x", 2),
    *_mlp_layers(r"detr_decoder\.box_rpb_embed_y", f"{_DEC}boxRPB_embed_y", 2),
    # Scoring of queries against the prompt.
    *_mlp_layers(r"dot_product_scoring\.text_mlp", "dot_prod_scoring.prompt_mlp", 2),
    _Rule(r"dot_product_scoring\.text_mlp_out_norm\.", "dot_prod_scoring.prompt_mlp.out_norm."),
    _Rule(r"dot_product_scoring\.text_proj\.", "dot_prod_scoring.prompt_proj."),
    _Rule(r"dot_product_scoring\.query_proj\.", "dot_prod_scoring.hs_proj."),
    # Segmentation head.
    _Rule(r"mask_decoder\.pixel_decoder\.", "segmentation_head.pixel_decoder."),
    _Rule(
        r"mask_decoder\.mask_embedder\.",
        "segmentation_head.mask_predictor.mask_embed.",
        aliases=("segmentation_head.mask_embed.",),
    ),
    _Rule(r"mask_decoder\.instance_projection\.", "segmentation_head.instance_seg_head."),
    _Rule(r"mask_decoder\.semantic_projection\.", "segmentation_head.semantic_seg_head."),
    _Rule(r"mask_decoder\.prompt_cross_attn\.", "segmentation_head.cross_attend_prompt.", attention="mha"),
    _Rule(r"mask_decoder\.prompt_cross_attn_norm\.", "segmentation_head.cross_attn_norm."),
)
_COMPILED = tuple((re.compile(rule.hf), rule) for rule in _RULES)

#: Whole keys whose tensors change shape or layout between the two formats.
_POSITION_TABLE = "vision_encoder.backbone.embeddings.position_embeddings"
_CLIP_PROJECTION = "text_encoder.text_projection.weight"
_EXACT: dict[str, tuple[str, str | None]] = {
    # Meta's table has a leading row for the pre-training CLS token, which SAM 3 drops.
    _POSITION_TABLE: (f"{_VIT}pos_embed", "cls_row"),
    "text_encoder.text_model.embeddings.position_embedding.weight": (f"{_TEXT}positional_embedding", None),
    # Meta multiplies x @ P; nn.Linear stores P transposed.
    _CLIP_PROJECTION: (f"{_TEXT}text_projection", "transpose"),
}
#: transformers parameters that SAM 3 never uses; a checkpoint may omit them. Sam3Model
#: replaces CLIP's projected output with its own ``text_projection`` of the token states.
OPTIONAL_HF_KEYS = frozenset({_CLIP_PROJECTION})

#: Meta keys with no counterpart in transformers' image model, dropped on purpose: RoPE tables
#: (recomputed), the tracker's own neck, point-prompt projections and instance queries that
#: Sam3Model does not implement.
_IGNORED_META = re.compile(
    r"^(?:backbone\.vision_backbone\.trunk\.blocks\.\d+\.attn\.freqs_cis"
    r"|backbone\.vision_backbone\.sam2_convs\."
    r"|geometry_encoder\.points_(?:direct|pool|pos_enc)_project\."
    r"|transformer\.decoder\.instance_)"
)
_FUSED_LEAF = re.compile(r"^(?P<proj>[qkv])_proj\.(?P<leaf>weight|bias)$")
_NECK_SCALE = re.compile(
    rf"^vision_encoder\.neck\.fpn_layers\.{_N}\.scale_layers\.(?P<index>\d+)\.(?P<leaf>.+)$"
)


@dataclass(frozen=True)
class MetaSource:
    """Where one transformers tensor lives in Meta's checkpoint.

    Attributes:
        keys: Meta key (without "detector."), then older aliases accepted on load.
        part: 0/1/2 when the tensor is the q/k/v third of a fused projection, else None.
        transform: "cls_row" (Meta has one extra leading position), "transpose", or None.
    """

    keys: tuple[str, ...]
    part: int | None = None
    transform: str | None = None


def meta_source(hf_key: str, config: Sam3Config) -> MetaSource:
    """The Meta checkpoint entry that holds transformers parameter ``hf_key``.

    Raises:
        KeyError: the key is not a parameter of transformers' Sam3Model this mapping knows.
    """
    if hf_key in _EXACT:
        meta_key, transform = _EXACT[hf_key]
        return MetaSource((meta_key,), transform=transform)
    neck = _NECK_SCALE.match(hf_key)
    if neck is not None:
        return MetaSource((_neck_scale_key(neck, config),))
    for pattern, rule in _COMPILED:
        match = pattern.match(hf_key)
        if match is None:
            continue
        rest = hf_key[match.end() :]
        prefixes = [template.format(**match.groupdict()) for template in (rule.meta, *rule.aliases)]
        if rule.attention is None:
            return MetaSource(tuple(prefix + rest for prefix in prefixes))
        return _attention_source(prefixes, rest, rule.attention, hf_key)
    raise KeyError(f"no Meta counterpart known for transformers parameter {hf_key!r}")


def _attention_source(prefixes: list[str], rest: str, style: str, hf_key: str) -> MetaSource:
    """q/k/v are thirds of one fused projection in Meta's model; the output projection is renamed."""
    fused = _FUSED_LEAF.match(rest)
    if fused is not None:
        part = "qkv".index(fused["proj"])
        leaf = f"qkv.{fused['leaf']}" if style == "vit" else f"in_proj_{fused['leaf']}"
        return MetaSource(tuple(prefix + leaf for prefix in prefixes), part=part)
    for hf_name in ("o_proj.", "out_proj."):
        if rest.startswith(hf_name):
            meta_name = "proj." if style == "vit" else "out_proj."
            return MetaSource(tuple(prefix + meta_name + rest[len(hf_name) :] for prefix in prefixes))
    raise KeyError(f"no Meta counterpart known for transformers parameter {hf_key!r}")


def _neck_scale_key(match: re.Match[str], config: Sam3Config) -> str:
    """Meta names the up-sampling convolutions per level: two at 4x (_0, _1), one at 2x."""
    level, index = int(match["n"]), int(match["index"])
    scale = float(config.vision_config.scale_factors[level])
    if scale == 4.0:
        name = {0: "dconv_2x2_0", 2: "dconv_2x2_1"}.get(index)
    else:
        name = "dconv_2x2" if scale == 2.0 and index == 0 else None
    if name is None:
        raise KeyError(f"no Meta counterpart known for neck level {level} (scale {scale}) layer {index}")
    return f"backbone.vision_backbone.convs.{level}.{name}.{match['leaf']}"


def expected_hf_shapes(config: Sam3Config) -> dict[str, tuple[int, ...]]:
    """Every parameter (and persistent buffer) of Sam3Model(config) with its shape.

    Built on the meta device, so the full 840M-parameter model costs no memory.
    """
    import torch
    from transformers import Sam3Model

    with torch.device("meta"):
        model = Sam3Model(config)
    return {key: tuple(value.shape) for key, value in model.state_dict().items()}


def is_meta_key(key: str) -> bool:
    """Meta's detector keys start with module names transformers does not use.

    geometry_encoder is left out: both layouts have a module of that name.
    """
    if key.startswith(("detector.", "tracker.")):
        return True
    return key.split(".", 1)[0] in {"backbone", "transformer", "segmentation_head", "dot_prod_scoring"}


def _strip_meta_prefix(key: str) -> str | None:
    """Meta's sam3.pt prefixes the image model with "detector." and the tracker with "tracker."."""
    if key.startswith("tracker."):
        return None
    for prefix in ("detector.", "sam3_model."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def convert_meta_state_dict(
    meta_state: Mapping[str, torch.Tensor], config: Sam3Config, source: str = "the Meta checkpoint"
) -> dict[str, torch.Tensor]:
    """Meta's state dict (sam3.pt) -> transformers' Sam3Model state dict for ``config``.

    Accepts keys with or without the "detector." prefix; the tracker's keys and the known
    extras (see ``_IGNORED_META``) are dropped. The result holds views of the input where
    no reshaping is needed.

    Raises:
        WeightsError: a parameter is missing, a key is not known, or a shape differs.
    """
    state = {stripped: tensor for key, tensor in meta_state.items() if (stripped := _strip_meta_prefix(key))}
    converted: dict[str, torch.Tensor] = {}
    consumed: set[str] = set()
    missing: list[str] = []
    mismatched: list[str] = []
    for hf_key, shape in expected_hf_shapes(config).items():
        where = meta_source(hf_key, config)
        meta_key = next((key for key in where.keys if key in state), None)
        if meta_key is None:
            if hf_key not in OPTIONAL_HF_KEYS:
                missing.append(where.keys[0])
            continue
        consumed.add(meta_key)
        tensor = _from_meta_tensor(state[meta_key], where)
        if tensor is None or tuple(tensor.shape) != shape:
            got = tuple(state[meta_key].shape)
            mismatched.append(f"{meta_key} {got} (transformers {hf_key} needs {shape})")
            continue
        converted[hf_key] = tensor
    unexpected = sorted(key for key in state if key not in consumed and not _IGNORED_META.match(key))
    if missing or unexpected or mismatched:
        raise WeightsError(mismatch_message(source, missing, unexpected, mismatched))
    return converted


def _from_meta_tensor(tensor: torch.Tensor, where: MetaSource) -> torch.Tensor | None:
    """Undo Meta's layout for one tensor; None when its shape cannot hold what is asked."""
    if where.part is not None:
        if tensor.shape[0] % 3:
            return None
        return tensor.chunk(3, dim=0)[where.part]
    if where.transform == "cls_row":
        return tensor[:, 1:] if tensor.dim() == 3 and tensor.shape[1] > 1 else None
    if where.transform == "transpose":
        return tensor.t() if tensor.dim() == 2 else None
    return tensor


def mismatch_message(
    source: str, missing: list[str], unexpected: list[str], mismatched: list[str], meta: bool = True
) -> str:
    """Counts and the first few names of each problem, in one paragraph."""
    problems = []
    for label, keys in (
        ("missing", missing),
        ("unexpected", unexpected),
        ("with the wrong shape", mismatched),
    ):
        if keys:
            problems.append(f"{len(keys)} {label} (e.g. {'; '.join(keys[:3])})")
    if meta:
        cause = (
            f"It is not Meta's original {META_CHECKPOINT_NAME}: another model or version, or a "
            "config.json next to it describes another architecture."
        )
    else:
        cause = "Its config.json and weights are not SAM 3's, or come from different versions."
    return (
        f"{source} does not match SAM 3's image model: {', '.join(problems)} tensors. {cause} Use "
        f"{DEFAULT_MODEL_ID}'s {META_CHECKPOINT_NAME} or its transformers-format files (config.json "
        "and model.safetensors), downloaded again if in doubt."
    )


def to_meta_state_dict(hf_state: Mapping[str, torch.Tensor], config: Sam3Config) -> dict[str, torch.Tensor]:
    """transformers' Sam3Model state dict -> Meta's layout, keys prefixed "detector." as in sam3.pt.

    The inverse of ``convert_meta_state_dict``; the tests use it to fabricate a Meta
    checkpoint from the tiny model. Meta's extra CLS position is written as zeros.

    Raises:
        KeyError: a key has no Meta counterpart (the mapping is incomplete for this model).
        ValueError: only some of a fused projection's q/k/v are present.
    """
    import torch

    meta: dict[str, torch.Tensor] = {}
    fused: dict[str, list[torch.Tensor | None]] = {}
    for hf_key, tensor in hf_state.items():
        where = meta_source(hf_key, config)
        key = where.keys[0]
        if where.part is not None:
            fused.setdefault(key, [None, None, None])[where.part] = tensor
        elif where.transform == "cls_row":
            meta[key] = torch.cat([torch.zeros_like(tensor[:, :1]), tensor], dim=1)
        elif where.transform == "transpose":
            meta[key] = tensor.t().contiguous()
        else:
            meta[key] = tensor
    for key, parts in fused.items():
        if any(part is None for part in parts):
            raise ValueError(f"{key}: only some of q, k and v are in the state dict")
        meta[key] = torch.cat(parts, dim=0)
    return {f"detector.{key}": tensor for key, tensor in meta.items()}


def read_meta_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """The state dict inside sam3.pt (or a Meta state dict saved as .safetensors).

    torch.load runs with weights_only=True (no code from the file is executed) and mmap,
    so the 3.4 GB file is paged in as tensors are used rather than read up front.
    """
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        safetensors_header(path)
        return load_file(path)
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as error:
        if "mmap" not in str(error):
            raise corrupt(path, _torch_load_detail(path, error)) from error
        loaded = _torch_load_unmapped(path)
    except Exception as error:  # pickle, EOF, zip errors: all mean an unreadable file
        raise corrupt(path, _torch_load_detail(path, error)) from error
    return _unwrap_state_dict(loaded, path)


def _torch_load_unmapped(path: Path) -> Any:
    """Old (pre-zip) torch.save files cannot be memory-mapped; read them whole."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise corrupt(path, _torch_load_detail(path, error)) from error


def _torch_load_detail(path: Path, error: BaseException) -> str:
    """torch's reason, plus the published size when the file is Meta's sam3.pt."""
    size = path.stat().st_size
    detail = f"torch.load failed ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
    if path.name == META_CHECKPOINT_NAME and size != SAM3_PT_PUBLISHED_BYTES:
        detail += (
            f"; the file is {size:,} bytes while {DEFAULT_MODEL_ID}'s {META_CHECKPOINT_NAME} at revision "
            f"{SAM3_PINNED_REVISION[:7]} is {SAM3_PT_PUBLISHED_BYTES:,} bytes"
        )
    return detail


def _unwrap_state_dict(loaded: Any, path: Path) -> dict[str, torch.Tensor]:
    """Meta saves {"model": state_dict}; training tools sometimes use "state_dict"."""
    import torch

    for wrapper in ("model", "state_dict"):
        if isinstance(loaded, dict) and isinstance(loaded.get(wrapper), dict):
            loaded = loaded[wrapper]
            break
    if not isinstance(loaded, dict) or not all(
        isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in loaded.items()
    ):
        raise WeightsError(
            f"{path} loads, but holds no state dict of tensors (found {type(loaded).__name__}): it is "
            f"not a SAM 3 checkpoint. Use {DEFAULT_MODEL_ID}'s {META_CHECKPOINT_NAME}."
        )
    return loaded
