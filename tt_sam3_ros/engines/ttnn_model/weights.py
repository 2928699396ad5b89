"""Weights of the image path: prepared once on the host (pure torch), then uploaded once.

Preparation turns transformers' parameters into the layouts the device ops take:
- linear weights transposed to (in, out), as ttnn.linear multiplies x @ W;
- q, k, v fused into one (C, 3*H*Dp) matrix laid out [q heads | k heads | v heads], each head
  zero-padded from D to Dp (two tiles, config.py) when D is not Dp; the output projection gets
  matching zero rows, so padding changes nothing numerically;
- the q and k columns of each head (and their biases) permuted from SAM 3's pairwise RoPE order
  (x0 y0 x1 y1 ...) to half-half order (x0 x1 ... | y0 y1 ...), the form of the device's fused
  rotary op (rotate_half); exact, since q.k is unchanged when both get the same permutation, and
  the cos/sin tables are permuted the same way; v keeps its order;
- the patch-embedding conv as a (3*p*p, C) matmul over the device's patches (vit.patchify: rows in
  (row, column, channel) order), with the input normalisation folded in (patch_embedding);
- absolute position embeddings tiled to the token grid and sorted into window order;
- RoPE cos/sin tables (window and global) in window order and half-half column order;
- ConvTranspose2d(k=2, s=2) as a (Cin, 4*Cout) matmul whose outputs are (ky, kx, Cout), undone
  by a pixel shuffle;
- the 3x3 convs kept in torch's (Cout, Cin, 3, 3) for ttnn.conv2d, which prepares them itself.

Upload: matmul weights in ``matmul_dtype`` (bfloat8_b by default), everything else in
``param_dtype`` (bfloat16), TILE layout, DRAM. With a cache directory each tensor goes through
ttnn.as_tensor, which stores the converted tensor on disk and reloads it on the next start.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig, window_order

#: A weight's role decides its device dtype: "matmul" -> matmul_dtype, "param" -> param_dtype,
#: "float32" -> float32 (state that must keep its bits, e.g. the decoder's initial box logits),
#: "conv" -> left on the host for ttnn.conv2d to prepare (in matmul_dtype), "row_major" ->
#: param_dtype in ROW_MAJOR (ttnn.group_norm's weight and bias rows).
KINDS = ("matmul", "param", "float32", "conv", "row_major")


@dataclass(frozen=True)
class HostWeight:
    """One prepared tensor: float32 values in device order, and its role (see KINDS)."""

    values: torch.Tensor
    kind: str


def _linear(weight: torch.Tensor) -> HostWeight:
    return HostWeight(weight.detach().float().t().contiguous(), "matmul")


def _row(values: torch.Tensor) -> HostWeight:
    return HostWeight(values.detach().float().reshape(1, -1), "param")


def _pad_heads(matrix: torch.Tensor, heads: int, head_dim: int, padded: int, axis: int) -> torch.Tensor:
    """Zero-pad each head's D slice along `axis` (0 rows, 1 columns) to `padded`."""
    if padded == head_dim:
        return matrix
    moved = matrix if axis == 1 else matrix.t()
    shaped = moved.reshape(moved.shape[0], heads, head_dim)
    padded_values = torch.nn.functional.pad(shaped, (0, padded - head_dim)).reshape(moved.shape[0], -1)
    return padded_values if axis == 1 else padded_values.t().contiguous()


def half_half_order(head_dim: int, padded: int) -> torch.Tensor:
    """Source column of each of a head's `padded` columns in half-half order, -1 for padding.

    rotate_pairwise pairs (2i, 2i+1); rotate_half pairs (i, padded/2 + i) and swaps whole tiles
    on the device, so column i takes 2i and column padded/2 + i takes 2i+1, each half padded
    with zeros to padded/2. Then rotate_half of the permuted vector is the permuted
    rotate_pairwise, for any cos and sin permuted the same way.
    """
    source = torch.full((padded,), -1, dtype=torch.long)
    half = head_dim // 2
    source[:half] = torch.arange(0, head_dim, 2)
    source[padded // 2 : padded // 2 + half] = torch.arange(1, head_dim, 2)
    return source


def _rope_heads(matrix: torch.Tensor, heads: int, head_dim: int, padded: int) -> torch.Tensor:
    """(rows, H*D) columns of q or k -> (rows, H*Dp) with each head in half-half order."""
    source = half_half_order(head_dim, padded)
    shaped = matrix.reshape(matrix.shape[0], heads, head_dim)
    ordered = torch.zeros(matrix.shape[0], heads, padded, dtype=matrix.dtype, device=matrix.device)
    used = source >= 0
    ordered[:, :, used] = shaped[:, :, source[used]]
    return ordered.reshape(matrix.shape[0], heads * padded)


def _rope_tables(
    layer: Any, config: ImagePathConfig, order: torch.Tensor | None
) -> tuple[HostWeight, HostWeight]:
    """cos, sin of one layer's RoPE as (1, 1, seq, Dp) in half-half column order (zero padding),
    sorted into window order for global layers."""
    with torch.no_grad():
        cos, sin = layer.rotary_emb(torch.zeros(1), layer.position_ids)
    tables = []
    for table in (cos, sin):
        table = table.reshape(-1, config.head_dim).float()
        if order is not None:
            table = table[order]
        table = _rope_heads(table, 1, config.head_dim, config.head_dim_padded)
        tables.append(HostWeight(table.reshape(1, 1, -1, config.head_dim_padded), "param"))
    return tables[0], tables[1]


def patch_embedding(conv: torch.nn.Conv2d) -> tuple[HostWeight, HostWeight]:
    """The patch conv over raw uint8 pixels x as one matmul: x @ W' + b'.

    The model sees (x / 255 - 0.5) / 0.5 = x / 127.5 - 1, which is linear in x, so
    W . (x / 127.5 - 1) + b = (W / 127.5) . x + (b - W . 1): W' = W / 127.5 and b' = b minus
    each output's weight sum, exactly. W's inputs are reordered from the conv's (channel, row,
    column) to the (row, column, channel) order of vit.patchify's patches; W' is (3*p*p, C).
    The bias is a "param" (bfloat16); W' is one too, not a bfloat8_b matmul weight: the raw
    pixels are up to 255 times the normalised ones' scale around an offset, so the weights'
    rounding must stay at bfloat16's, not bfloat8_b's shared-exponent blocks.
    """
    weight = conv.weight.detach().float()  # (C, 3, p, p)
    flat = weight.permute(0, 2, 3, 1).reshape(weight.shape[0], -1)  # (C, p*p*3)
    bias = conv.bias.detach().float() if conv.bias is not None else flat.new_zeros(weight.shape[0])
    folded_bias = bias - flat.double().sum(dim=1).float()
    return HostWeight((flat / 127.5).t().contiguous(), "param"), _row(folded_bias)


def prepare_vit(backbone: Any, config: ImagePathConfig) -> dict[str, HostWeight]:
    """transformers' Sam3ViTModel -> named host weights for vit.py."""
    order = window_order(config)
    c, h, d, dp = config.hidden, config.heads, config.head_dim, config.head_dim_padded
    embeddings = backbone.embeddings
    with torch.no_grad():
        position = embeddings._tile_position_embeddings(
            embeddings.position_embeddings, config.grid, config.grid
        )
    patch_weight, patch_bias = patch_embedding(embeddings.patch_embeddings.projection)
    weights: dict[str, HostWeight] = {
        "patch_embed.weight": patch_weight,
        "patch_embed.bias": patch_bias,
        "pos_embed": HostWeight(
            position.detach().float().reshape(config.tokens, c)[order].reshape(1, -1, c), "param"
        ),
        "ln_pre.weight": _row(backbone.layer_norm.weight),
        "ln_pre.bias": _row(backbone.layer_norm.bias),
    }
    windowed = [i for i in range(config.layers) if not config.is_global(i)]
    global_ = [i for i in range(config.layers) if config.is_global(i)]
    if windowed:
        cos, sin = _rope_tables(backbone.layers[windowed[0]], config, None)
        weights["rope.window.cos"], weights["rope.window.sin"] = cos, sin
    if global_:
        cos, sin = _rope_tables(backbone.layers[global_[0]], config, order)
        weights["rope.global.cos"], weights["rope.global.sin"] = cos, sin
    for index, layer in enumerate(backbone.layers):
        attention = layer.attention
        q, k, v = attention.q_proj, attention.k_proj, attention.v_proj
        qkv_w = [_rope_heads(_linear(p.weight).values, h, d, dp) for p in (q, k)]
        qkv_w.append(_pad_heads(_linear(v.weight).values, h, d, dp, axis=1))
        qkv_b = [_rope_heads(p.bias.detach().float().reshape(1, -1), h, d, dp) for p in (q, k)]
        qkv_b.append(_pad_heads(v.bias.detach().float().reshape(1, -1), h, d, dp, axis=1))
        prefix = f"layers.{index}."
        weights.update(
            {
                prefix + "ln1.weight": _row(layer.layer_norm1.weight),
                prefix + "ln1.bias": _row(layer.layer_norm1.bias),
                prefix + "qkv.weight": HostWeight(torch.cat(qkv_w, dim=1), "matmul"),
                prefix + "qkv.bias": HostWeight(torch.cat(qkv_b, dim=1), "param"),
                prefix + "o.weight": HostWeight(
                    _pad_heads(_linear(attention.o_proj.weight).values, h, d, dp, 0), "matmul"
                ),
                prefix + "o.bias": _row(attention.o_proj.bias),
                prefix + "ln2.weight": _row(layer.layer_norm2.weight),
                prefix + "ln2.bias": _row(layer.layer_norm2.bias),
                prefix + "fc1.weight": _linear(layer.mlp.fc1.weight),
                prefix + "fc1.bias": _row(layer.mlp.fc1.bias),
                prefix + "fc2.weight": _linear(layer.mlp.fc2.weight),
                prefix + "fc2.bias": _row(layer.mlp.fc2.bias),
            }
        )
    return weights


def _transposed_conv(conv: torch.nn.ConvTranspose2d) -> tuple[HostWeight, HostWeight]:
    """ConvTranspose2d(k=2, s=2) as x @ W: W (Cin, 4*Cout) with columns ordered (ky, kx, Cout)."""
    weight = conv.weight.detach().float()  # (Cin, Cout, 2, 2)
    matrix = weight.permute(0, 2, 3, 1).reshape(weight.shape[0], -1).contiguous()
    return HostWeight(matrix, "matmul"), _row(conv.bias.detach().float().repeat(4))


def prepare_neck(neck: Any, config: ImagePathConfig) -> dict[str, HostWeight]:
    """transformers' Sam3VisionNeck -> named host weights for neck.py."""
    weights: dict[str, HostWeight] = {}
    for level, fpn in enumerate(neck.fpn_layers):
        prefix = f"fpn.{level}."
        transposed = [m for m in fpn.scale_layers if isinstance(m, torch.nn.ConvTranspose2d)]
        for step, conv in enumerate(transposed, 1):
            weights[prefix + f"up{step}.weight"], weights[prefix + f"up{step}.bias"] = _transposed_conv(conv)
        proj1 = fpn.proj1.weight.detach().float()
        weights[prefix + "proj1.weight"] = HostWeight(
            proj1.reshape(proj1.shape[0], -1).t().contiguous(), "matmul"
        )
        weights[prefix + "proj1.bias"] = _row(fpn.proj1.bias)
        weights[prefix + "proj2.weight"] = HostWeight(fpn.proj2.weight.detach().float().contiguous(), "conv")
        weights[prefix + "proj2.bias"] = HostWeight(
            fpn.proj2.bias.detach().float().reshape(1, 1, 1, -1), "conv"
        )
    return weights


def fingerprint(weights: dict[str, HostWeight], dtypes: dict[str, str]) -> str:
    """Content hash of the prepared weights and dtypes: the cache directory's name.

    Hashes every value (a few seconds for the full model), so a changed checkpoint can never
    be served a stale cache.
    """
    digest = hashlib.sha256(json.dumps(dtypes, sort_keys=True).encode())
    for name in sorted(weights):
        weight = weights[name]
        digest.update(f"{name}:{weight.kind}:{tuple(weight.values.shape)}".encode())
        digest.update(weight.values.contiguous().numpy().tobytes())
    return digest.hexdigest()[:20]


def upload(
    ttnn: Any,
    device: Any,
    weights: dict[str, HostWeight],
    matmul_dtype: Any,
    param_dtype: Any,
    cache_dir: Path | None = None,
) -> dict[str, Any]:
    """Convert and place every weight once; conv weights stay host tensors for ttnn.conv2d.

    Returns name -> ttnn tensor (TILE, or ROW_MAJOR for "row_major", DRAM interleaved on the
    device; conv weights on host).
    """
    placed: dict[str, Any] = {}
    for name, weight in weights.items():
        if weight.kind == "conv":
            placed[name] = ttnn.from_torch(weight.values, dtype=ttnn.float32, layout=ttnn.ROW_MAJOR_LAYOUT)
            continue
        dtype = {"matmul": matmul_dtype, "float32": ttnn.float32}.get(weight.kind, param_dtype)
        cache_file = str(cache_dir / name) if cache_dir is not None else None
        placed[name] = ttnn.as_tensor(
            weight.values,
            dtype,
            layout=ttnn.ROW_MAJOR_LAYOUT if weight.kind == "row_major" else ttnn.TILE_LAYOUT,
            device=device,
            memory_config=ttnn.DRAM_MEMORY_CONFIG,
            cache_file_name=cache_file,
        )
    return placed
