"""Multi-head attention of SAM 3's prompt path (Sam3Attention) in TT-NN ops, and its masks.

Sam3Attention projects query, key and value from three possibly different inputs (the fusion
encoder's self-attention takes q = k = x + pos but v = x; cross-attention takes k = v from
another sequence of another length). ttnn's fused head split
(``transformer.split_query_key_value_and_split_heads``) needs one [q | k | v] input, and with
``kv_input`` equal sequence lengths, so multi_head_attention splits heads by two transposes
instead (split_heads): correct for every case, at the price of two copies per projection. The fusion
encoder's self-attention, where q and k differ from v only by the position encoding, takes the
fused split on one [q | k | v] projection (positioned_self_attention).

Shapes: activations (B, S, C) bfloat16 TILE; heads (B, H, S, Dp) with Dp the head dim rounded up
to a tile (the weights zero-pad each head, so padding changes no value: the kernel itself never
pads a head). Sequence lengths must be whole tiles: pad the sequence and mask the padded keys
with an additive mask from ``key_padding_mask`` (DRAM, TILE, as the SDPA kernel requires).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tt_sam3_ros.engines.ttnn_model.config import TILE, DeviceSettings, round_up
from tt_sam3_ros.engines.ttnn_model.layers import linear

#: Added to the score of a masked key: exp() of it is exactly 0 in float32 and bfloat16, and it
#: stays finite, so a padded row can never turn into NaN.
MASKED = -1e9


@dataclass(frozen=True)
class AttentionShape:
    """Head layout of one Sam3Attention.

    Attributes:
        heads: H.
        head_dim: D = C / H (32 for SAM 3's prompt path: legal for the kernel as it is).
        head_dim_padded: D rounded up to a tile (the tiny test model's 16 -> 32).
    """

    heads: int
    head_dim: int
    head_dim_padded: int

    @classmethod
    def of(cls, hidden: int, heads: int) -> AttentionShape:
        head_dim = hidden // heads
        return cls(heads, head_dim, round_up(head_dim, TILE))

    @property
    def width(self) -> int:
        """H * Dp: the projections' padded output width."""
        return self.heads * self.head_dim_padded


def attention_chunk(seq: int, preferred: int) -> int:
    """The largest tile multiple <= preferred that divides `seq` (the SDPA kernel's rule)."""
    if seq % TILE:
        raise ValueError(f"attention over {seq} tokens: pad the sequence to a multiple of {TILE}")
    for chunk in range(min(preferred, seq) // TILE * TILE, 0, -TILE):
        if seq % chunk == 0:
            return chunk
    return TILE


def key_padding_mask(queries: int, valid: torch.Tensor, keys: int) -> torch.Tensor:
    """Host-side additive mask (B, 1, queries, keys): 0 where the key is valid, MASKED elsewhere.

    `valid` is a (B, k) bool tensor (k <= keys): True for a real key, as transformers' text
    mask; keys beyond k (the tile padding) are masked too.
    """
    batch, given = valid.shape
    keep = torch.zeros(batch, keys, dtype=torch.bool)
    keep[:, :given] = valid.bool()
    row = torch.where(keep, 0.0, MASKED).reshape(batch, 1, 1, keys)
    return row.expand(batch, 1, queries, keys).contiguous()


def split_heads(ttnn: Any, x: Any, shape: AttentionShape, settings: DeviceSettings) -> Any:
    """(B, S, H*Dp) -> (B, H, S, Dp); consumes x.

    Through the transpose: (B, H*Dp, S) views as (B, H, Dp, S) (rows stay whole tiles), and a
    second transpose gives the heads, two copies of x's own size. A reshape to (B, S, H, Dp)
    would copy x into tiles whose rows are the H heads (8 of 32 rows for SAM 3: four times x's
    bytes), which the permute then reads whole.
    """
    batch, seq = x.shape[0], x.shape[1]
    columns = ttnn.permute(x, (0, 2, 1), memory_config=settings.memory)
    ttnn.deallocate(x)
    grouped = ttnn.reshape(columns, (batch, shape.heads, shape.head_dim_padded, seq))
    heads = ttnn.permute(grouped, (0, 1, 3, 2), memory_config=settings.memory)
    ttnn.deallocate(grouped)
    return heads


def multi_head_attention(
    ttnn: Any,
    query_in: Any,
    key_in: Any,
    value_in: Any,
    w: dict[str, Any],
    shape: AttentionShape,
    settings: DeviceSettings,
    mask: Any = None,
) -> Any:
    """Sam3Attention: o(softmax(q k^T / sqrt(D) + mask) v) for (B, Sq, C) queries, (B, Sk, C) keys.

    `w` holds q, k, v, o weights (``q.weight`` (C, H*Dp) ... ``o.weight`` (H*Dp, C)) and biases;
    `mask` is an additive (1 or B, 1 or H, Sq, Sk) bfloat16 TILE tensor in DRAM, or None. Sq and
    Sk must be tile multiples. Leaves its inputs allocated; returns (B, Sq, C).
    """
    query = split_heads(ttnn, linear(ttnn, query_in, w, "q", settings), shape, settings)
    key = split_heads(ttnn, linear(ttnn, key_in, w, "k", settings), shape, settings)
    value = split_heads(ttnn, linear(ttnn, value_in, w, "v", settings), shape, settings)
    return attend(ttnn, query, key, value, w, shape, settings, mask)


def positioned_self_attention(
    ttnn: Any, x: Any, w: dict[str, Any], shape: AttentionShape, settings: DeviceSettings
) -> Any:
    """Sam3Attention over one sequence with q = k = x + position and v = x, for (B, S, C) `x`.

    One projection makes [q | k | v] (``qkv.weight`` (C, 3*H*Dp)), one add puts in the position's
    share and the biases (``qkv.position_bias`` (1, S, 3*H*Dp), broadcast over the batch: see
    prompt_weights.prepare_positioned_self_attention), and the fused head split takes all three
    at once: no copy per projection, as multi_head_attention's reshape and permute make. Leaves
    `x` allocated; returns (B, S, C).
    """
    projected = linear(ttnn, x, w, "qkv", settings)
    positioned = ttnn.add(projected, w["qkv.position_bias"], memory_config=settings.memory)
    ttnn.deallocate(projected)
    query, key, value = ttnn.transformer.split_query_key_value_and_split_heads(
        positioned, num_heads=shape.heads, transpose_key=False, memory_config=settings.memory
    )
    ttnn.deallocate(positioned)
    return attend(ttnn, query, key, value, w, shape, settings, kernel=settings.fusion_attention_kernel)


def attend(
    ttnn: Any,
    query: Any,
    key: Any,
    value: Any,
    w: dict[str, Any],
    shape: AttentionShape,
    settings: DeviceSettings,
    mask: Any = None,
    kernel: Any = None,
) -> Any:
    """The fused attention over (B, H, S, Dp) heads (at the `kernel` compute config,
    settings.prompt_attention_kernel by default), the heads merged and the output projection
    ``o``; consumes query, key and value, returns (B, Sq, C)."""
    q_chunk, k_chunk = settings.prompt_attention_chunks
    program = ttnn.SDPAProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(*settings.grid),
        q_chunk_size=attention_chunk(query.shape[2], q_chunk),
        k_chunk_size=attention_chunk(key.shape[2], k_chunk),
        exp_approx_mode=settings.prompt_exp_approx,
    )
    context = ttnn.transformer.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=mask,
        is_causal=False,
        scale=shape.head_dim**-0.5,
        program_config=program,
        compute_kernel_config=kernel or settings.prompt_attention_kernel,
        memory_config=settings.memory,
    )
    for tensor in (query, key, value):
        ttnn.deallocate(tensor)
    merged = ttnn.transformer.concatenate_heads(context, memory_config=settings.memory)
    ttnn.deallocate(context)
    out = linear(ttnn, merged, w, "o", settings)
    ttnn.deallocate(merged)
    return out


def sub_weights(weights: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The entries of `weights` under `prefix` (e.g. "self_attn."), without it."""
    return {name[len(prefix) :]: value for name, value in weights.items() if name.startswith(prefix)}
