"""The Blackhole image path's layouts: window order, the device's patching of the uploaded uint8
pixels, the normalisation folded into the patch embedding (emulator, SAM 3's real shapes), and
the RoPE order."""

from __future__ import annotations

import pytest
import torch
from frames import random_frame

from tt_sam3_ros.core import preprocess
from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig, device_settings, window_order

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


@pytest.fixture
def uploaded(ttnn):
    """A random resized frame, on an emulated p150a as the engine uploads it, with the settings."""
    from tt_sam3_ros.engines.ttnn_model import vit

    device = ttnn.open_device(device_id=0, l1_small_size=32768, trace_region_size=1 << 20)
    settings = device_settings(ttnn, device)
    image = random_frame(0, (1008, 1008))
    raw = ttnn.from_torch(
        torch.from_numpy(image).reshape(CONFIG.input_shape),
        dtype=ttnn.uint8,
        layout=ttnn.ROW_MAJOR_LAYOUT,
        device=device,
    )
    patches = vit.patchify(ttnn, raw, CONFIG, settings)
    return image, patches, device, settings


def test_device_patches_are_the_conv_patches_sorted_into_windows(ttnn, uploaded):
    image, patches, _, _ = uploaded
    assert (patches.dtype, patches.layout) == (ttnn.bfloat16, ttnn.TILE_LAYOUT)
    got = ttnn.to_torch(patches).float().reshape(72 * 72, 14 * 14 * 3)
    # Image row order, each patch's values (row in patch, column in patch, channel).
    row_order = torch.from_numpy(image).reshape(72, 14, 72, 14, 3).permute(0, 2, 1, 3, 4).reshape(72 * 72, -1)
    assert torch.equal(got, row_order[window_order(CONFIG)].float())  # uint8 -> bfloat16 is exact


def _device_embedding(ttnn, patches, device, settings, weight, bias):
    """The patch-embedding linear as vit_embeddings runs it (bfloat16 weights, full fidelity)."""
    from tt_sam3_ros.engines.ttnn_model.layers import linear

    w = {
        f"patch_embed.{name}": ttnn.from_torch(
            values, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device
        )
        for name, values in (("weight", weight), ("bias", bias))
    }
    out = linear(ttnn, patches, w, "patch_embed", settings, kernel=settings.exact_kernel)
    return ttnn.to_torch(out).float().reshape(CONFIG.tokens, CONFIG.hidden)


def test_folded_normalisation_gives_the_embedding_of_the_normalised_pixels(ttnn, uploaded):
    """Raw uint8 patches times the folded weights, plus the folded bias, equal transformers' conv
    of Sam3Processor's normalised pixels within bfloat16 rounding; unfolded weights (the raw pixels
    taken as normalised) or the folded weights without their bias do not (negative controls).

    The gate, rms error <= 2^-7 of the embedding's rms, is bfloat16's: the folded
    path's rms error is 0.0016 of 0.335; normalised bfloat16 patches with bfloat8_b weights at
    HiFi2 give 0.0022; the same fold with bfloat8_b weights at HiFi2, 0.0046.
    """
    from tt_sam3_ros.engines.ttnn_model.weights import patch_embedding

    image, patches, device, settings = uploaded
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, CONFIG.hidden, CONFIG.patch, CONFIG.patch, bias=False)
    with torch.no_grad():
        normalised = torch.from_numpy(preprocess.normalise(image))
        reference = torch.nn.functional.conv2d(normalised, conv.weight, stride=CONFIG.patch)[0]
    reference = reference.reshape(CONFIG.hidden, -1).t()[window_order(CONFIG)]
    gate = 2**-7 * float(reference.pow(2).mean().sqrt())

    def rms_error(weight: torch.Tensor, bias: torch.Tensor) -> float:
        got = _device_embedding(ttnn, patches, device, settings, weight, bias)
        return float((got - reference).pow(2).mean().sqrt())

    weight, bias = patch_embedding(conv)
    assert weight.values.shape == (CONFIG.patch_features, CONFIG.hidden)
    assert bias.values.shape == (1, CONFIG.hidden)
    folded = rms_error(weight.values, bias.values)
    print(f"folded patch embedding on uint8 pixels: rms error {folded:.5f}, gate {gate:.5f}")
    assert folded <= gate
    unfolded = conv.weight.detach().permute(0, 2, 3, 1).reshape(CONFIG.hidden, -1).t().contiguous()
    assert rms_error(unfolded, torch.zeros(1, CONFIG.hidden)) > 100 * gate
    assert rms_error(weight.values, torch.zeros(1, CONFIG.hidden)) > 100 * gate
