"""Host-side layout helpers of the Blackhole image path: window order, patching, RoPE order."""

from __future__ import annotations

import torch

from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig, patchify, window_order

CONFIG = ImagePathConfig(
    1008, 14, 72, 24, 1024, 16, 64, 64, 4096, 32, (7, 15, 23, 31), 1e-6, 256, (4, 2, 1, 0.5)
)


def test_window_order_lists_each_window_row_major():
    order = window_order(CONFIG)
    assert sorted(order.tolist()) == list(range(72 * 72))
    # The first window's first row is image row 0, columns 0..23; its second row starts at row 1.
    assert order[:24].tolist() == list(range(24))
    assert order[24].item() == 72
    # The second window starts at column 24 of image row 0.
    assert order[576].item() == 24


def test_patchify_is_the_conv_patch_order_sorted_into_windows():
    pixels = torch.randn(3, 1008, 1008)
    patches = patchify(pixels, CONFIG).reshape(72 * 72, 3 * 14 * 14)
    row_order = pixels.reshape(3, 72, 14, 72, 14).permute(1, 3, 0, 2, 4).reshape(72 * 72, -1)
    assert torch.equal(patches, row_order[window_order(CONFIG)])
    # The patch-embedding conv equals a matmul over these patches with the flattened weight.
    weight = torch.randn(8, 3, 14, 14)
    conv = torch.nn.functional.conv2d(pixels[None], weight, stride=14)[0].reshape(8, -1).t()
    assert torch.allclose(row_order @ weight.reshape(8, -1).t(), conv, atol=1e-3)


def test_half_half_rope_on_permuted_columns_is_sam3s_pairwise_rope():
    """The device's rotate_half on q and k in half-half order (weights.py) gives SAM 3's pairwise
    RoPE: the same rotated values, permuted, and so the same attention scores q.k."""
    from transformers.models.sam3.modeling_sam3 import rotate_pairwise

    from tt_sam3_ros.engines.ttnn_model.weights import _rope_heads, half_half_order

    heads, dim, padded, seq = 3, 16, 64, 40
    q, k = torch.randn(seq, heads * dim), torch.randn(seq, heads * dim)
    angles = torch.randn(seq, dim // 2).repeat_interleave(2, dim=-1)
    cos, sin = angles.cos(), angles.sin()

    def pairwise(x):
        x = x.reshape(seq, heads, dim)
        return x * cos[:, None] + rotate_pairwise(x) * sin[:, None]

    def half_half(x):
        x = _rope_heads(x, heads, dim, padded).reshape(seq, heads, padded)
        c, s = (_rope_heads(t, 1, dim, padded) for t in (cos, sin))
        turned = torch.cat((-x[..., padded // 2 :], x[..., : padded // 2]), dim=-1)
        return x * c[:, None] + turned * s[:, None]

    source = half_half_order(dim, padded)
    used = source >= 0
    assert torch.equal(half_half(q)[..., used], pairwise(q)[..., source[used]])
    assert torch.equal(half_half(q)[..., ~used], torch.zeros(seq, heads, int((~used).sum())))
    scores = torch.einsum("qhd,khd->hqk", pairwise(q), pairwise(k))
    assert torch.allclose(torch.einsum("qhd,khd->hqk", half_half(q), half_half(k)), scores, atol=1e-5)
