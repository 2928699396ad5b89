"""transformers' Sam3MaskDecoder (the segmentation head) in TT-NN ops, without its pixel decoder.

Here: the head's prompt cross-attention (image tokens attend to the prompt tokens, pre-norm, with a
residual), the mask embedder (a 3-layer ReLU MLP on the decoder's normed queries), the instance
projection (a 1x1 conv, so a linear over pixels) and the mask logits, the dot product of every
query's embedding with every pixel's. Not yet here: the pixel decoder (nearest 2x upsampling,
3x3 conv, GroupNorm(8), ReLU, twice) between the cross-attention and the instance projection, and
the semantic projection (the engine's post-processing does not read it).

Shapes (bfloat16, TILE, DRAM interleaved; B = prompts in the batch):
    encoder  (B, S, C)   the fusion encoder's image tokens (S = 5184).
    prompt   (B, T, C)   prompt tokens padded to a tile; mask (B, 1, S, T) as in fusion_encoder.py.
    queries  (B, Q, C)   the last decoder layer's output-normed query rows (Q a tile multiple).
    pixels   (B, H*W, C) the pixel decoder's output, pixels in row-major order (H = W = 288), as
                         ttnn.conv2d's (1, 1, B*H*W, C) output reshaped.
    logits   (B, Q, H*W) mask logits at 288 x 288: only the rows the caller keeps matter, so the
                         engine should select rows (top-k) before this product (issue 12).
Weights: prompt_weights.prepare_segmentation_head, uploaded with weights.upload.
"""

from __future__ import annotations

from typing import Any

from .attention import AttentionShape, multi_head_attention, sub_weights
from .config import DeviceSettings
from .layers import layer_norm, linear


def prompt_cross_attention(
    ttnn: Any,
    encoder: Any,
    prompt: Any,
    mask: Any,
    w: dict[str, Any],
    shape: AttentionShape,
    eps: float,
    settings: DeviceSettings,
) -> Any:
    """encoder + attention(LayerNorm(encoder), prompt, prompt); leaves every input allocated."""
    normed = layer_norm(ttnn, encoder, w, "prompt_attn_norm", eps, settings)
    attended = multi_head_attention(
        ttnn, normed, prompt, prompt, sub_weights(w, "prompt_attn."), shape, settings, mask
    )
    ttnn.deallocate(normed)
    out = ttnn.add(encoder, attended, memory_config=settings.memory)
    ttnn.deallocate(attended)
    return out


def mask_embeddings(ttnn: Any, queries: Any, w: dict[str, Any], settings: DeviceSettings) -> Any:
    """Sam3MaskEmbedder: three linears, ReLU fused into the first two; leaves queries allocated."""
    first = linear(ttnn, queries, w, "mask_embed.0", settings, activation="relu")
    second = linear(ttnn, first, w, "mask_embed.1", settings, activation="relu")
    ttnn.deallocate(first)
    out = linear(ttnn, second, w, "mask_embed.2", settings)
    ttnn.deallocate(second)
    return out


def mask_logits(ttnn: Any, embeddings: Any, pixels: Any, w: dict[str, Any], settings: DeviceSettings) -> Any:
    """einsum("bqc,bchw->bqhw") of the embeddings with the instance-projected pixels: (B, Q, H*W)."""
    instance = linear(ttnn, pixels, w, "instance_proj", settings)
    out = ttnn.matmul(
        embeddings,
        instance,
        transpose_b=True,
        dtype=ttnn.bfloat16,
        memory_config=settings.memory,
        compute_kernel_config=settings.matmul_kernel,
    )
    ttnn.deallocate(instance)
    return out
