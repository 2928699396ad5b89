"""transformers' Sam3ViTModel in TT-NN ops: patch embedding, position terms, the ViT blocks.

Activations are bfloat16 TILE tensors of shape (1, tokens, C) in window order (config.py):
a windowed block views them as (windows, 576, C) with a reshape, a global block as
(1, 5184, C). Each function consumes (deallocates) the activation it is given, except the
trace's input buffer, which must survive for the next frame.
"""

from __future__ import annotations

from typing import Any

from tt_sam3_ros.engines.ttnn_model.config import DeviceSettings, ImagePathConfig
from tt_sam3_ros.engines.ttnn_model.layers import layer_norm, linear

#: The block's activations kept in L1 (settings.l1) rather than DRAM: each is made and consumed
#: within a few ops, and its per-core share (full size: 96 KiB for a (1, 5184, 1024) bfloat16
#: tensor on 110 cores, 284 KiB for the qkv projection, 378 KiB for the MLP's hidden layer) fits
#: beside the circular buffers of the ops that run while it lives, as the real library's
#: allocator on a mock p150a judges (tools/ttnn_mock, both grids). The residual stream too
#: ("residual": the sum after the attention; "out": the block's output, the next block's input):
#: it lives through a whole block, 96 KiB per core, and each block would otherwise write it to
#: DRAM twice and read it back three times. The last block's output goes to DRAM (settings.memory)
#: for the neck, whose own buffers and circular buffers come nearest the L1 limit.
L1_ACTIVATIONS = frozenset(
    {"ln1", "qkv", "heads", "rope", "attention", "concat", "o", "residual", "ln2", "fc1", "fc2", "out"}
)


def placed(name: str, settings: DeviceSettings) -> Any:
    """The memory config of the block activation `name`: L1 if it is in L1_ACTIVATIONS."""
    return settings.l1 if name in L1_ACTIVATIONS else settings.memory


def apply_rope(ttnn: Any, heads: Any, cos: Any, sin: Any, settings: DeviceSettings) -> Any:
    """x * cos + rotate_half(x) * sin on (B, H, S, Dp) in one fused op; consumes `heads`.

    The q and k columns are in half-half order (weights.py), so rotate_half computes SAM 3's
    pairwise rotation; cos and sin are (1, 1, S, Dp) and broadcast over windows and heads.
    """
    out = ttnn.experimental.rotary_embedding(
        heads, cos, sin, memory_config=placed("rope", settings), compute_kernel_config=settings.exact_kernel
    )
    ttnn.deallocate(heads)
    return out


def rope_attention(
    ttnn: Any,
    hidden: Any,
    w: dict[str, Any],
    rope: tuple[Any, Any],
    config: ImagePathConfig,
    settings: DeviceSettings,
    windowed: bool,
) -> Any:
    """Sam3ViTRoPEAttention on (1, tokens, C); attention within each window or over all tokens.
    Consumes `hidden`."""
    batch, seq = (config.windows_per_side**2, config.window_tokens) if windowed else (1, config.tokens)
    width = config.heads * config.head_dim_padded
    qkv = linear(ttnn, hidden, w, "qkv", settings, memory=placed("qkv", settings))
    ttnn.deallocate(hidden)
    qkv_batched = ttnn.reshape(qkv, (batch, seq, 3 * width))
    query, key, value = ttnn.transformer.split_query_key_value_and_split_heads(
        qkv_batched, num_heads=config.heads, transpose_key=False, memory_config=placed("heads", settings)
    )
    ttnn.deallocate(qkv_batched)
    cos, sin = rope
    query = apply_rope(ttnn, query, cos, sin, settings)
    key = apply_rope(ttnn, key, cos, sin, settings)
    q_chunk, k_chunk = settings.vit_attention_chunks
    program = ttnn.SDPAProgramConfig(
        compute_with_storage_grid_size=ttnn.CoreCoord(*settings.grid),
        q_chunk_size=q_chunk,
        k_chunk_size=k_chunk,
        exp_approx_mode=settings.vit_exp_approx,
    )
    context = ttnn.transformer.scaled_dot_product_attention(
        query,
        key,
        value,
        is_causal=False,
        scale=config.head_dim**-0.5,
        program_config=program,
        compute_kernel_config=settings.vit_attention_kernel,
        memory_config=placed("attention", settings),
    )
    for tensor in (query, key, value):
        ttnn.deallocate(tensor)
    # (batch, seq, H*Dp)
    merged = ttnn.transformer.concatenate_heads(context, memory_config=placed("concat", settings))
    ttnn.deallocate(context)
    merged_flat = ttnn.reshape(merged, (1, config.tokens, width))
    out = linear(ttnn, merged_flat, w, "o", settings, memory=placed("o", settings), fused=True)
    ttnn.deallocate(merged_flat)
    return out


def vit_layer(
    ttnn: Any,
    x: Any,
    w: dict[str, Any],
    rope: tuple[Any, Any],
    config: ImagePathConfig,
    settings: DeviceSettings,
    windowed: bool,
    out_memory: Any = None,
) -> Any:
    """Sam3ViTLayer: x + attn(ln1(x)), then + mlp(ln2(.)); consumes x, returns (1, tokens, C) in
    `out_memory` (placed("out"), L1, by default)."""
    normed = layer_norm(ttnn, x, w, "ln1", config.eps, settings, memory=placed("ln1", settings))
    attended = rope_attention(ttnn, normed, w, rope, config, settings, windowed)
    residual = ttnn.add(x, attended, memory_config=placed("residual", settings))
    ttnn.deallocate(x)
    ttnn.deallocate(attended)
    normed = layer_norm(ttnn, residual, w, "ln2", config.eps, settings, memory=placed("ln2", settings))
    mlp = settings.vit_mlp_kernel
    expanded = linear(
        ttnn,
        normed,
        w,
        "fc1",
        settings,
        activation="gelu",
        kernel=mlp,
        memory=placed("fc1", settings),
        fused=True,
    )
    ttnn.deallocate(normed)
    projected = linear(
        ttnn, expanded, w, "fc2", settings, kernel=mlp, memory=placed("fc2", settings), fused=True
    )
    ttnn.deallocate(expanded)
    out = ttnn.add(residual, projected, memory_config=out_memory or placed("out", settings))
    ttnn.deallocate(residual)
    ttnn.deallocate(projected)
    return out


def patchify(ttnn: Any, image: Any, config: ImagePathConfig, settings: DeviceSettings) -> Any:
    """uint8 ROW_MAJOR (1, S, 3*S) pixels (rows of RGB triples) -> bfloat16 TILE (1, 1, tokens, 3*p*p).
    (A bfloat16 input, the engine's fallback upload, is copied instead of cast.)

    Tokens in window order (config.py), each patch's values in (row, column, channel) order,
    which is how the pixel rows already hold them (weights.patch_embedding permutes the conv
    weight to match). The device neither tilizes nor reshape-copies uint8, so the cast (exact:
    0..255 fit bfloat16's 8 significant bits) comes first; then one 6-D permute does the patching
    and the window sort at once. Leaves `image` (the trace's input buffer) allocated.
    """
    n, w, p = config.windows_per_side, config.window, config.patch
    if image.dtype == ttnn.uint8:
        pixels = ttnn.typecast(image, ttnn.bfloat16, memory_config=settings.memory)
    else:  # the bfloat16 upload the engine falls back to when the chip's uint8 cast fails its check
        pixels = ttnn.clone(image, memory_config=settings.memory)
    # pixel row = ((window row) * w + row in window) * p + row in patch; a row's values run
    # over ((window col) * w + col in window) * 3p + (col in patch) * 3 + channel.
    cells = ttnn.reshape(pixels, (n, w, p, n, w, 3 * p))  # (wy, ty, ky, wx, tx, kx c)
    ttnn.deallocate(pixels)
    # -> (wy, wx, ty, tx, ky, kx c): window order, each patch's rows side by side.
    ordered = ttnn.permute(cells, (0, 3, 1, 4, 2, 5), memory_config=settings.memory)
    ttnn.deallocate(cells)
    rows = ttnn.reshape(ordered, (1, 1, config.tokens, config.patch_features))
    ttnn.deallocate(ordered)
    patches = ttnn.to_layout(rows, ttnn.TILE_LAYOUT, memory_config=settings.memory)
    ttnn.deallocate(rows)
    return patches


def vit_embeddings(
    ttnn: Any, image: Any, w: dict[str, Any], config: ImagePathConfig, settings: DeviceSettings
) -> Any:
    """Sam3ViTEmbeddings + the pre-norm: uint8 (1, S, 3*S) pixels -> (1, tokens, C).

    The normalisation ((x / 255 - 0.5) / 0.5) is folded into the patch embedding's weight and bias
    (weights.patch_embedding), so the raw pixels go straight into the matmul, at full fidelity:
    HiFi2 would keep only 7 of the 8 bits an integer up to 255 has. Leaves `image` (the trace's
    input buffer) allocated.
    """
    patches = patchify(ttnn, image, config, settings)
    embedded = linear(ttnn, patches, w, "patch_embed", settings, kernel=settings.exact_kernel)
    ttnn.deallocate(patches)
    embedded_flat = ttnn.reshape(embedded, (1, config.tokens, config.hidden))
    positioned = ttnn.add(embedded_flat, w["pos_embed"], memory_config=settings.memory)
    ttnn.deallocate(embedded_flat)
    out = layer_norm(ttnn, positioned, w, "ln_pre", config.eps, settings)
    ttnn.deallocate(positioned)
    return out


def layer_weights(weights: dict[str, Any], index: int) -> dict[str, Any]:
    """The weights of block `index`, without their "layers.{index}." prefix."""
    prefix = f"layers.{index}."
    return {name[len(prefix) :]: value for name, value in weights.items() if name.startswith(prefix)}


def rope_for(weights: dict[str, Any], windowed: bool) -> tuple[Any, Any]:
    """The (cos, sin) tables of a windowed or a global block."""
    kind = "window" if windowed else "global"
    return weights[f"rope.{kind}.cos"], weights[f"rope.{kind}.sin"]


def rope_in_l1(
    ttnn: Any, weights: dict[str, Any], kinds: set[bool], settings: DeviceSettings
) -> dict[bool, tuple[Any, Any]]:
    """The (cos, sin) tables of each block kind in `kinds` (True: windowed), copied from DRAM to
    L1 for the blocks; the caller frees them after the last block.

    The fused rotary op reads its tables once per window and head (144 times per call in a
    windowed block), so from DRAM they would be the rotary's largest traffic; in L1 both kinds
    take about 13 KiB per core, and only while the blocks run.
    """
    return {
        windowed: tuple(ttnn.to_memory_config(table, settings.l1) for table in rope_for(weights, windowed))
        for windowed in sorted(kinds)
    }


def sam3_vit_model(
    ttnn: Any,
    image: Any,
    weights: dict[str, Any],
    config: ImagePathConfig,
    settings: DeviceSettings,
    layers: range | None = None,
) -> Any:
    """Sam3ViTModel: uint8 (1, S, 3*S) pixels -> (1, tokens, C) last hidden state, in window order
    (in DRAM)."""
    x = vit_embeddings(ttnn, image, weights, config, settings)
    indexes = layers if layers is not None else range(config.layers)
    rope = rope_in_l1(ttnn, weights, {not config.is_global(index) for index in indexes}, settings)
    for index in indexes:
        windowed = not config.is_global(index)
        last = settings.memory if index == indexes[-1] else None
        x = vit_layer(
            ttnn, x, layer_weights(weights, index), rope[windowed], config, settings, windowed, last
        )
    for tables in rope.values():
        for table in tables:
            ttnn.deallocate(table)
    return x
