"""Weights of the prompt path (geometry encoder, fusion encoder, decoder, heads), prepared on
the host in pure torch, in the style of weights.py and uploaded with its ``upload`` (matmul
weights bfloat8_b, norms and biases bfloat16, TILE in DRAM; the pixel decoder's 3x3 convs stay
host tensors for ttnn.conv2d and its GroupNorm rows go ROW_MAJOR).

Layouts:
- q, k, v projections (C, H*Dp): transposed for x @ W, each head's columns zero-padded from D
  to Dp when D is not a tile multiple (the tiny model's 16); their biases (1, H*Dp) likewise;
- the output projection (H*Dp, C) with the matching zero rows, so padding changes nothing;
- MLP fc1 (C, I), fc2 (I, C); every bias and LayerNorm parameter a (1, N) row.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tt_sam3_ros.engines.ttnn_model.attention import AttentionShape
from tt_sam3_ros.engines.ttnn_model.config import TILE
from tt_sam3_ros.engines.ttnn_model.decoder import RPB_SCALE
from tt_sam3_ros.engines.ttnn_model.weights import HostWeight


def _matrix(weight: torch.Tensor) -> torch.Tensor:
    return weight.detach().float().t().contiguous()


def _row(values: torch.Tensor) -> HostWeight:
    return HostWeight(values.detach().float().reshape(1, -1), "param")


def _pad_head_columns(matrix: torch.Tensor, shape: AttentionShape) -> torch.Tensor:
    """(rows, H*D) -> (rows, H*Dp): zero columns after each head's D."""
    rows = matrix.shape[0]
    shaped = matrix.reshape(rows, shape.heads, shape.head_dim)
    padding = shape.head_dim_padded - shape.head_dim
    return torch.nn.functional.pad(shaped, (0, padding)).reshape(rows, shape.width).contiguous()


def prepare_attention(attention: Any, prefix: str) -> dict[str, HostWeight]:
    """transformers' Sam3Attention -> q, k, v, o weights and biases for attention.py."""
    shape = AttentionShape.of(attention.hidden_size, attention.num_attention_heads)
    weights: dict[str, HostWeight] = {}
    for name in ("q", "k", "v"):
        linear = getattr(attention, f"{name}_proj")
        weights[f"{prefix}{name}.weight"] = HostWeight(
            _pad_head_columns(_matrix(linear.weight), shape), "matmul"
        )
        weights[f"{prefix}{name}.bias"] = HostWeight(
            _pad_head_columns(linear.bias.detach().float().reshape(1, -1), shape), "param"
        )
    out = _pad_head_columns(attention.o_proj.weight.detach().float(), shape).t().contiguous()
    weights[prefix + "o.weight"] = HostWeight(out, "matmul")
    weights[prefix + "o.bias"] = _row(attention.o_proj.bias)
    return weights


def _norm(norm: torch.nn.LayerNorm, prefix: str) -> dict[str, HostWeight]:
    return {prefix + "weight": _row(norm.weight), prefix + "bias": _row(norm.bias)}


def _mlp(mlp: Any, prefix: str) -> dict[str, HostWeight]:
    return {
        prefix + "fc1.weight": HostWeight(_matrix(mlp.fc1.weight), "matmul"),
        prefix + "fc1.bias": _row(mlp.fc1.bias),
        prefix + "fc2.weight": HostWeight(_matrix(mlp.fc2.weight), "matmul"),
        prefix + "fc2.bias": _row(mlp.fc2.bias),
    }


def prepare_positioned_self_attention(
    attention: Any, position: torch.Tensor, prefix: str
) -> dict[str, HostWeight]:
    """Sam3Attention with q = k = x + position and v = x -> one [q | k | v] projection for
    attention.positioned_self_attention: ``qkv.weight`` (C, 3*H*Dp) and the per-token bias
    ``qkv.position_bias`` (1, S, 3*H*Dp) = [position @ Wq + bq | position @ Wk + bk | bv].

    (x + p) W + b = x W + (p W + b), so the position's part of the query and key projections is a
    constant of the image size, computed here once in float32 instead of in every replay.
    `position` is the (1, S, C) sine position encoding in token order.
    """
    weights = prepare_attention(attention, prefix)
    matrices = [weights.pop(f"{prefix}{name}.weight").values for name in ("q", "k", "v")]
    biases = [weights.pop(f"{prefix}{name}.bias").values for name in ("q", "k", "v")]
    tokens = position.detach().float().reshape(1, -1, matrices[0].shape[0])
    terms = [tokens @ matrices[0] + biases[0], tokens @ matrices[1] + biases[1]]
    terms.append(biases[2].expand_as(terms[0]))
    weights[prefix + "qkv.weight"] = HostWeight(torch.cat(matrices, dim=1).contiguous(), "matmul")
    weights[prefix + "qkv.position_bias"] = HostWeight(torch.cat(terms, dim=-1).contiguous(), "param")
    return weights


def prepare_fusion_encoder_layer(
    layer: Any, position: torch.Tensor, prefix: str = ""
) -> dict[str, HostWeight]:
    """transformers' Sam3DetrEncoderLayer -> named host weights for fusion_encoder.py; `position`
    is the image's (1, S, C) sine position encoding in token order (folded into the
    self-attention's projection, prepare_positioned_self_attention)."""
    weights = {
        **_norm(layer.layer_norm1, prefix + "ln1."),
        **prepare_positioned_self_attention(layer.self_attn, position, prefix + "self_attn."),
        **_norm(layer.layer_norm2, prefix + "ln2."),
        **prepare_attention(layer.cross_attn, prefix + "cross_attn."),
        **_norm(layer.layer_norm3, prefix + "ln3."),
        **_mlp(layer.mlp, prefix + "mlp."),
    }
    return weights


def prepare_fusion_encoder(encoder: Any, position: torch.Tensor) -> dict[str, HostWeight]:
    """transformers' Sam3DetrEncoder -> every layer's weights under "layers.{i}." (`position` as
    prepare_fusion_encoder_layer takes it)."""
    weights: dict[str, HostWeight] = {}
    for index, layer in enumerate(encoder.layers):
        weights.update(prepare_fusion_encoder_layer(layer, position, f"layers.{index}."))
    return weights


def prepare_decoder_layer(layer: Any, prefix: str = "") -> dict[str, HostWeight]:
    """transformers' Sam3DetrDecoderLayer -> named host weights for decoder.py."""
    return {
        **prepare_attention(layer.self_attn, prefix + "self_attn."),
        **_norm(layer.self_attn_layer_norm, prefix + "self_attn_norm."),
        **prepare_attention(layer.text_cross_attn, prefix + "text_attn."),
        **_norm(layer.text_cross_attn_layer_norm, prefix + "text_attn_norm."),
        **prepare_attention(layer.vision_cross_attn, prefix + "vision_attn."),
        **_norm(layer.vision_cross_attn_layer_norm, prefix + "vision_attn_norm."),
        **_mlp(layer.mlp, prefix + "mlp."),
        **_norm(layer.mlp_layer_norm, prefix + "mlp_norm."),
    }


def _decoder_mlp(mlp: Any, prefix: str) -> dict[str, HostWeight]:
    """Sam3DecoderMLP's 2 or 3 linears as layer1..layer3 weights (C_in, C_out) and biases."""
    weights: dict[str, HostWeight] = {}
    for name in ("layer1", "layer2", "layer3"):
        linear = getattr(mlp, name)
        if linear is not None:
            weights[f"{prefix}{name}.weight"] = HostWeight(_matrix(linear.weight), "matmul")
            weights[f"{prefix}{name}.bias"] = _row(linear.bias)
    return weights


def prepare_scoring(scoring: Any, decoder: Any) -> dict[str, HostWeight]:
    """transformers' Sam3DotProductScoring and the decoder's output and presence heads -> scoring.py."""
    return {
        **_norm(decoder.output_layer_norm, "output_norm."),
        **_norm(decoder.presence_layer_norm, "presence_norm."),
        **_decoder_mlp(decoder.presence_head, "presence_head."),
        **_decoder_mlp(scoring.text_mlp, "text_mlp."),
        **_norm(scoring.text_mlp_out_norm, "text_norm."),
        "text_proj.weight": HostWeight(_matrix(scoring.text_proj.weight), "matmul"),
        "text_proj.bias": _row(scoring.text_proj.bias),
        "query_proj.weight": HostWeight(_matrix(scoring.query_proj.weight), "matmul"),
        "query_proj.bias": _row(scoring.query_proj.bias),
    }


#: Pixel-decoder stages Sam3Model runs: it feeds three maps (FPN scales 4 and 2, and the fusion
#: encoder's tokens at scale 1), so two of the module's num_upsampling_stages convs and norms run.
PIXEL_DECODER_STAGES = 2


def _group_norm_row(values: torch.Tensor) -> HostWeight:
    """A GroupNorm weight or bias as ttnn.group_norm reads it: ROW_MAJOR rows of 32 channels.

    The interleaved kernel splits the channels over cores in chunks that are whole tiles wide,
    so ttnn.create_group_norm_weight_bias_rm pads nothing and its layout is this plain reshape.
    """
    flat = values.detach().float().reshape(-1)
    if flat.numel() % 32:
        raise ValueError(f"GroupNorm over {flat.numel()} channels: the device needs a multiple of 32")
    return HostWeight(flat.reshape(1, 1, -1, 32), "row_major")


def prepare_pixel_decoder(pixel_decoder: Any, stages: int = PIXEL_DECODER_STAGES) -> dict[str, HostWeight]:
    """transformers' Sam3PixelDecoder -> per stage a 3x3 conv (left for ttnn.conv2d to prepare, as
    the neck's) and a GroupNorm's weight and bias rows, under "pixel.{stage}."."""
    weights: dict[str, HostWeight] = {}
    for stage in range(stages):
        conv, norm = pixel_decoder.conv_layers[stage], pixel_decoder.norms[stage]
        prefix = f"pixel.{stage}."
        weights[prefix + "conv.weight"] = HostWeight(conv.weight.detach().float().contiguous(), "conv")
        weights[prefix + "conv.bias"] = HostWeight(conv.bias.detach().float().reshape(1, 1, 1, -1), "conv")
        weights[prefix + "norm.weight"] = _group_norm_row(norm.weight)
        weights[prefix + "norm.bias"] = _group_norm_row(norm.bias)
    return weights


def prepare_segmentation_head(mask_decoder: Any) -> dict[str, HostWeight]:
    """transformers' Sam3MaskDecoder (without the semantic projection) -> segmentation_head.py."""
    projection = mask_decoder.instance_projection.weight.detach().float()  # (C_out, C_in, 1, 1)
    weights = {
        **prepare_attention(mask_decoder.prompt_cross_attn, "prompt_attn."),
        **_norm(mask_decoder.prompt_cross_attn_norm, "prompt_attn_norm."),
        **prepare_pixel_decoder(mask_decoder.pixel_decoder),
        "instance_proj.weight": HostWeight(projection.flatten(1).t().contiguous(), "matmul"),
        "instance_proj.bias": _row(mask_decoder.instance_projection.bias),
    }
    for index, linear in enumerate(mask_decoder.mask_embedder.layers):
        weights[f"mask_embed.{index}.weight"] = HostWeight(_matrix(linear.weight), "matmul")
        weights[f"mask_embed.{index}.bias"] = _row(linear.bias)
    return weights


def prepare_geometry_encoder(encoder: Any, position: torch.Tensor) -> dict[str, HostWeight]:
    """transformers' Sam3GeometryEncoder -> geometry_encoder.py's weights for a text-only prompt.

    `position` is the sine position encoding (1, C, H, W) of the FPN level it attends to (the
    neck's scale-1 map), flattened to (1, H*W, C) row-major like the neck's output. "start" is
    the image-independent first token, prompt_layer_norm(final_proj(cls_embed)), made here in
    float32 as row 0 of one (1, 32, C) tile (zero rows after it). Per layer only the
    self-attention's value and output projections are kept: with one valid key, that attention
    is o_proj(v_proj(x)) (geometry_encoder.py says why).
    """
    with torch.no_grad():
        start = encoder.prompt_layer_norm(encoder.final_proj(encoder.cls_embed.weight)).float()
    tile = torch.zeros(1, TILE, start.shape[-1])
    tile[0, 0] = start[0]
    weights = {
        "start": HostWeight(tile, "param"),
        "position": HostWeight(position.detach().float().flatten(2).transpose(1, 2).contiguous(), "param"),
        **_norm(encoder.output_layer_norm, "output_norm."),
    }
    for index, layer in enumerate(encoder.layers):
        prefix = f"layers.{index}."
        values_only = prefix + "self_attn.v.", prefix + "self_attn.o."
        self_attention = prepare_attention(layer.self_attn, prefix + "self_attn.")
        weights.update(
            {
                **_norm(layer.layer_norm1, prefix + "ln1."),
                **{name: w for name, w in self_attention.items() if name.startswith(values_only)},
                **_norm(layer.layer_norm2, prefix + "ln2."),
                **prepare_attention(layer.cross_attn, prefix + "cross_attn."),
                **_norm(layer.layer_norm3, prefix + "ln3."),
                **_mlp(layer.mlp, prefix + "mlp."),
            }
        )
    return weights


# the decoder stack --------------------------------------------------------------------------
def _constant(values: torch.Tensor) -> HostWeight:
    """A bfloat16 (TILE, DRAM) constant: masks, 0/1 matrices, the initial state."""
    return HostWeight(values.detach().float().contiguous(), "param")


def _in_rows(values: torch.Tensor, rows: int, width: int | None = None) -> torch.Tensor:
    """(N, k) per-query values -> (1, rows, width): row 0 (the presence token) and the padding
    zero, the queries at rows 1..N, columns zero-padded to `width`."""
    out = torch.zeros(1, rows, values.shape[1] if width is None else width)
    out[0, 1 : 1 + values.shape[0], : values.shape[1]] = values.detach().float()
    return out


def _sine_embedding(encoding: Any, hidden: int) -> dict[str, HostWeight]:
    """encode_boxes as boxes @ F + phase then sin: feature i of coordinate c (transformers'
    order y, x, w, h) is sin(c * scale / t_i) for even i and cos, i.e. sin(. + pi/2), for odd."""
    features = encoding.num_position_features
    index = torch.arange(features, dtype=torch.float64)
    frequency = encoding.scale / encoding.temperature ** (
        2 * torch.div(index, 2, rounding_mode="floor") / features
    )
    matrix = torch.zeros(32, 4 * features, dtype=torch.float64)
    for block, column in enumerate((1, 0, 2, 3)):  # box columns cx, cy, w, h; blocks y, x, w, h
        matrix[column, block * features : (block + 1) * features] = frequency
    phase = (index % 2) * (math.pi / 2)
    if 4 * features != 2 * hidden:
        raise ValueError(f"sine embedding width {4 * features} is not the ref_point_head's {2 * hidden}")
    return {"sine.weight": _constant(matrix), "sine.bias": _row(phase.repeat(4))}


def _box_bias_edges(config: Any) -> dict[str, HostWeight]:
    """The edge matrix (32, 2 * P * 32) and its bias: column (axis block, position p, k) holds
    8 (p / size - edge) for k = 0, 2 (edges lo, hi) and its negation for k = 1, 3; y positions
    use k 0..3, x positions k 4..7 (so the first MLP layer can tell the axes apart); positions
    beyond the grid stay zero. Box columns: cx, cy, w, h; edges centre -+ size / 2."""
    positions, width = config.positions, 32
    matrix = torch.zeros(32, 2, positions, width, dtype=torch.float64)
    bias = torch.zeros(2, positions, width, dtype=torch.float64)
    for axis, (centre, size, count, first) in enumerate(((1, 3, config.height, 0), (0, 2, config.width, 4))):
        grid = torch.arange(count, dtype=torch.float64) / count
        for edge, half in enumerate((-0.5, 0.5)):  # lo = centre - size / 2, hi = centre + size / 2
            for sign, k in ((1.0, first + 2 * edge), (-1.0, first + 2 * edge + 1)):
                matrix[centre, axis, :count, k] = -sign * RPB_SCALE
                matrix[size, axis, :count, k] = -sign * RPB_SCALE * half
                bias[axis, :count, k] = sign * RPB_SCALE * grid
    return {
        "rpb.edges.weight": _constant(matrix.reshape(32, -1)),
        "rpb.edges.bias": _row(bias.reshape(-1)),
    }


def _box_bias_mlp(decoder: Any, config: Any) -> dict[str, HostWeight]:
    """box_rpb_embed_y and _x as one MLP over the (axis, position) rows (decoder.box_bias)."""
    embed_y, embed_x = decoder.box_rpb_embed_y, decoder.box_rpb_embed_x
    hidden = embed_y.layer1.out_features
    first = torch.zeros(32, 2 * hidden, dtype=torch.float64)
    for block, (embed, k) in enumerate(((embed_y, 0), (embed_x, 4))):
        weight = embed.layer1.weight.detach().double() / math.log(RPB_SCALE)  # (hidden, 2)
        for edge in range(2):
            first[k + 2 * edge, block * hidden : (block + 1) * hidden] = weight[:, edge]
            first[k + 2 * edge + 1, block * hidden : (block + 1) * hidden] = -weight[:, edge]
    first_bias = torch.cat([embed_y.layer1.bias, embed_x.layer1.bias]).detach().double()
    second = torch.cat([embed_y.layer2.weight, embed_x.layer2.weight], dim=1).detach().double().t()
    # A y row also carries relu(x bias) through the x half (and an x row the y half's): the
    # second bias cancels both, so y row + x row = transformers' y + x exactly.
    leak_x = torch.relu(embed_x.layer1.bias.detach().double()) @ embed_x.layer2.weight.detach().double().t()
    leak_y = torch.relu(embed_y.layer1.bias.detach().double()) @ embed_y.layer2.weight.detach().double().t()
    true_bias = (embed_y.layer2.bias + embed_x.layer2.bias).detach().double()
    return {
        "rpb.layer1.weight": HostWeight(first.float(), "matmul"),
        "rpb.layer1.bias": _row(first_bias),
        "rpb.layer2.weight": HostWeight(second.float().contiguous(), "matmul"),
        "rpb.layer2.bias": _row((true_bias - leak_x - leak_y) / 2),
    }


def _box_bias_outer(config: Any) -> torch.Tensor:
    """(2 P, height * width) 0/1: y position i and x position j both feed column i * width + j."""
    outer = torch.zeros(2 * config.positions, config.height * config.width)
    columns = torch.arange(config.height * config.width)
    outer[columns // config.width, columns] = 1.0
    outer[config.positions + columns % config.width, columns] = 1.0
    return outer


def prepare_decoder(decoder: Any, config: Any) -> dict[str, HostWeight]:
    """transformers' Sam3DetrDecoder -> decoder.decoder_stack's weights and constants.

    `config` is decoder.DecoderStackConfig (the grid size is the image's, not the module's).
    Every layer under "layers.{i}."; the heads (output_norm, box_head, presence_norm,
    presence_head, ref_point_head) under their transformers names; the box head's 4 outputs
    padded to 32 columns (zero weights, so padding columns of the logits stay 0).
    """
    from tt_sam3_ros.engines.ttnn_model.attention import key_padding_mask

    rows, hidden = config.rows, decoder.config.hidden_size
    box_head = _decoder_mlp(decoder.box_head, "box_head.")
    last = decoder.box_head.layer3
    box_head["box_head.layer3.weight"] = HostWeight(
        torch.nn.functional.pad(_matrix(last.weight), (0, 28)), "matmul"
    )
    box_head["box_head.layer3.bias"] = _row(torch.nn.functional.pad(last.bias.detach().float(), (0, 28)))
    initial = torch.cat([decoder.presence_token.weight, decoder.query_embed.weight])
    query_rows = _in_rows(torch.ones(config.queries, hidden), rows)
    weights = {
        **{
            name: value
            for index, layer in enumerate(decoder.layers)
            for name, value in prepare_decoder_layer(layer, f"layers.{index}.").items()
        },
        **_norm(decoder.output_layer_norm, "output_norm."),
        **box_head,
        **_norm(decoder.presence_layer_norm, "presence_norm."),
        **_decoder_mlp(decoder.presence_head, "presence_head."),
        **_decoder_mlp(decoder.ref_point_head, "ref_point_head."),
        **_sine_embedding(decoder.position_encoding, hidden),
        **_box_bias_edges(config),
        **_box_bias_mlp(decoder, config),
        "rpb.outer": _constant(_box_bias_outer(config)),
        "rpb.rows": _constant(query_rows[:, None, :, :1].expand(1, 1, rows, 2 * config.positions)),
        "query_rows": _constant(query_rows),
        "hidden.initial": _constant(
            torch.nn.functional.pad(initial.detach().float(), (0, 0, 0, rows - initial.shape[0]))[None]
        ),
        "boxes.initial": HostWeight(_in_rows(decoder.reference_points.weight, rows, 32), "float32"),
        "self_mask": _constant(
            key_padding_mask(rows, torch.ones(1, 1 + config.queries, dtype=torch.bool), rows)
        ),
    }
    return weights
