"""One full-size SAM 3 ViT block (1024 wide, 16 heads, 72x72 tokens, 24x24 windows) through the
emulator, with bfloat8_b weights, against transformers' Sam3ViTModel. Gate: PCC >= 0.99.

Random weights (the real ones are gated), scaled so that attention is peaked and the block
outweighs its residual input (else a wrong RoPE or window order would hide under the residual),
with non-trivial norms and biases so every parameter path is exercised; one windowed block plus
the patch embedding and pre-norm keeps it to seconds on two cores.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from compare import pcc

from tt_sam3_ros.core import preprocess

PCC_GATE = 0.99


@pytest.fixture(scope="module")
def full_size_vit():
    from transformers import Sam3ViTConfig
    from transformers.models.sam3.modeling_sam3 import Sam3ViTModel

    config = Sam3ViTConfig(
        hidden_size=1024,
        intermediate_size=4096,
        num_attention_heads=16,
        num_hidden_layers=1,
        global_attn_indexes=[],
        window_size=24,
        image_size=1008,
        patch_size=14,
    )
    state = torch.random.get_rng_state()
    torch.manual_seed(7)
    try:
        model = Sam3ViTModel(config).eval()
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, torch.nn.LayerNorm):
                    module.weight.normal_(1.0, 0.2)
                    module.bias.normal_(0.0, 0.2)
                elif isinstance(module, torch.nn.Linear):
                    # Large enough that attention is peaked (RoPE and windows matter) and the block's
                    # output outweighs its residual input; transformers' 0.02 init hides both.
                    module.weight.normal_(0.0, 0.03 if module.in_features > 1024 else 0.06)
                    module.bias.normal_(0.0, 0.02)
        image = torch.randint(0, 256, (1008, 1008, 3), dtype=torch.uint8)
    finally:
        torch.random.set_rng_state(state)
    pixels = torch.from_numpy(preprocess.normalise(image.numpy()))
    with torch.no_grad():
        reference = model(pixel_values=pixels).last_hidden_state.reshape(5184, 1024)
    return model, image, reference


def _device_pcc(ttnn, model, image, reference, wrong_rope: bool = False) -> float:
    """Run embeddings + block 0 on the emulated chip, from the uint8 image as the engine uploads
    it; PCC of the last hidden state vs `reference`. `wrong_rope` turns the rotation the other way
    (sin negated)."""
    from tt_sam3_ros.engines.ttnn_model import vit
    from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig, device_settings, window_order
    from tt_sam3_ros.engines.ttnn_model.weights import prepare_vit, upload

    vision = SimpleNamespace(
        backbone_config=model.config, fpn_hidden_size=256, scale_factors=[4.0, 2.0, 1.0, 0.5]
    )
    config = ImagePathConfig.from_hf(vision)
    assert (config.hidden, config.heads, config.tokens, config.window) == (1024, 16, 5184, 24)
    device = ttnn.open_device(device_id=0, l1_small_size=32768, trace_region_size=1 << 20)
    weights = upload(ttnn, device, prepare_vit(model, config), ttnn.bfloat8_b, ttnn.bfloat16)
    assert weights["layers.0.qkv.weight"].dtype == ttnn.bfloat8_b
    if wrong_rope:
        sin = weights["rope.window.sin"]
        weights["rope.window.sin"] = ttnn.from_torch(
            -ttnn.to_torch(sin).float(), dtype=sin.dtype, layout=ttnn.TILE_LAYOUT, device=device
        )
    raw = ttnn.from_torch(
        image.reshape(config.input_shape), dtype=ttnn.uint8, layout=ttnn.ROW_MAJOR_LAYOUT, device=device
    )
    out = vit.sam3_vit_model(ttnn, raw, weights, config, device_settings(ttnn, device))
    window_ordered = ttnn.to_torch(out).float().reshape(config.tokens, config.hidden)
    ours = torch.empty_like(window_ordered)
    ours[window_order(config)] = window_ordered
    return pcc(ours, reference)


def test_full_size_windowed_block_matches_transformers(ttnn, full_size_vit):
    block_pcc = _device_pcc(ttnn, *full_size_vit)
    print(f"full-size ViT block (embeddings + windowed block 0), bfloat8_b weights: PCC {block_pcc:.5f}")
    assert block_pcc >= PCC_GATE, block_pcc


def test_the_gate_catches_a_wrong_rope(ttnn, full_size_vit):
    """Negative control: the same run with RoPE turned the wrong way must fail the gate."""
    pcc = _device_pcc(ttnn, *full_size_vit, wrong_rope=True)
    print(f"full-size ViT block with RoPE reversed (negative control): PCC {pcc:.5f}")
    assert pcc < PCC_GATE, pcc
