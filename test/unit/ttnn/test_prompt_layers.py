"""The prompt path's layers in TT-NN ops, run through the emulator against transformers (float32).

Each layer gets random weights at a gain where attention matters (the residual alone scores far
below the gate, printed), bfloat8_b matmul weights and bfloat16 activations as on the chip, and the
gate PCC >= 0.99. A negative control (key and value projections of the cross-attention swapped)
runs the same check and must fail it, so the gate can tell a wrong layer from a right one.
Full size is transformers' Sam3Config(): width 256, 8 heads of 32, MLP 2048, 72 x 72 image tokens.
"""

from __future__ import annotations

import pytest
import torch
from compare import pcc
from random_weights import randomise

PCC_GATE = 0.99
#: Prompt tokens as the model sees them: 32 text tokens and the geometry encoder's class token.
PROMPT_TOKENS = 33


def prompt_validity(tokens: int = PROMPT_TOKENS, text: int = 20, batch: int = 1) -> torch.Tensor:
    """(batch, tokens) bool: per prompt b, `text` - 7 b real text tokens, then text padding, then
    the class token (prompts of different lengths in one batch)."""
    valid = torch.zeros(batch, tokens, dtype=torch.bool)
    for row in range(batch):
        valid[row, : text - 7 * row] = True
    valid[:, -1] = True
    return valid


def swap_key_value(host: dict, prefix: str) -> dict:
    """The negative control: the attention's key and value projections exchanged."""
    bad = dict(host)
    for part in ("weight", "bias"):
        bad[f"{prefix}k.{part}"], bad[f"{prefix}v.{part}"] = (
            host[f"{prefix}v.{part}"],
            host[f"{prefix}k.{part}"],
        )
    return bad


class Chip:
    """An emulated device with the engine's settings, and uploads as the engine makes them."""

    def __init__(self, ttnn, trace_region_size: int = 0) -> None:
        from tt_sam3_ros.engines.ttnn_model.config import device_settings

        self.ttnn = ttnn
        self.device = ttnn.open_device(device_id=0, trace_region_size=trace_region_size)
        self.settings = device_settings(ttnn, self.device)

    def weights(self, host: dict) -> dict:
        from tt_sam3_ros.engines.ttnn_model.weights import upload

        return upload(self.ttnn, self.device, host, self.ttnn.bfloat8_b, self.ttnn.bfloat16)

    def tensor(self, values: torch.Tensor):
        ttnn = self.ttnn
        return ttnn.from_torch(
            values,
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=self.device,
            memory_config=ttnn.DRAM_MEMORY_CONFIG,
        )

    def read(self, tensor) -> torch.Tensor:
        return self.ttnn.to_torch(tensor).float()


# fusion encoder -----------------------------------------------------------------------------
def encoder_case(hidden: int, heads: int, intermediate: int, side: int, seed: int = 0, batch: int = 1):
    """A randomised Sam3DetrEncoderLayer, its inputs and transformers' float32 output; `batch`
    prompts over the same image (image tokens repeated, one position encoding for all)."""
    from transformers.models.sam3.configuration_sam3 import Sam3DETREncoderConfig
    from transformers.models.sam3.modeling_sam3 import Sam3DetrEncoderLayer

    config = Sam3DETREncoderConfig(
        hidden_size=hidden, num_attention_heads=heads, intermediate_size=intermediate
    )
    config._attn_implementation = "eager"
    layer = Sam3DetrEncoderLayer(config).eval()
    randomise(layer, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    tokens = side * side
    inputs = {
        "vision": torch.randn(1, tokens, hidden, generator=generator).repeat(batch, 1, 1),
        "position": torch.randn(1, tokens, hidden, generator=generator),
        "prompt": torch.randn(batch, PROMPT_TOKENS, hidden, generator=generator),
        "valid": prompt_validity(batch=batch),
    }
    mask = torch.where(inputs["valid"], 0.0, float("-inf")).reshape(batch, 1, 1, PROMPT_TOKENS)
    with torch.no_grad():
        want = layer(inputs["vision"], inputs["prompt"], inputs["position"], prompt_cross_attn_mask=mask)
    return layer, inputs, want


def run_encoder_layer(chip: Chip, host: dict, layer, inputs: dict, shared: bool = False) -> torch.Tensor:
    """One fusion_encoder_layer; with `shared`, given the first prompt's image tokens only (the
    layer runs their self-attention once and repeats it to the prompts)."""
    from tt_sam3_ros.engines.ttnn_model.attention import key_padding_mask
    from tt_sam3_ros.engines.ttnn_model.fusion_encoder import fusion_encoder_layer
    from tt_sam3_ros.engines.ttnn_model.prompt_config import PromptLayerConfig, padded_length

    tokens, prompt = inputs["vision"].shape[1], inputs["prompt"]
    padded = padded_length(prompt.shape[1])
    vision = inputs["vision"][:1] if shared else inputs["vision"]
    out = fusion_encoder_layer(
        chip.ttnn,
        chip.tensor(vision),
        chip.tensor(torch.nn.functional.pad(prompt, (0, 0, 0, padded - prompt.shape[1]))),
        chip.tensor(key_padding_mask(tokens, inputs["valid"], padded)),
        chip.weights(host),
        PromptLayerConfig.from_layer(layer),
        chip.settings,
        shared=shared,
    )
    return chip.read(out)


@pytest.fixture(scope="module")
def full_encoder_case():
    return encoder_case(hidden=256, heads=8, intermediate=2048, side=72)


@pytest.mark.parametrize(("batch", "shared"), [(1, False), (2, False), (1, True), (2, True)])
def test_fusion_encoder_layer_tiny_matches_transformers(ttnn, batch, shared):
    """Per-prompt image tokens, or (`shared`, as the stack's first layer) one set for all."""
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_fusion_encoder_layer

    layer, inputs, want = encoder_case(hidden=32, heads=2, intermediate=64, side=8, batch=batch)
    host = prepare_fusion_encoder_layer(layer, inputs["position"])
    got = run_encoder_layer(Chip(ttnn), host, layer, inputs, shared)
    assert got.shape == want.shape
    residual_only = pcc(inputs["vision"], want)
    print(
        f"tiny fusion encoder layer, {batch} prompt(s), shared tokens {shared}: PCC {pcc(got, want):.5f} "
        f"(alone {residual_only:.3f})"
    )
    assert pcc(got, want) >= PCC_GATE


def test_fusion_encoder_layer_full_size_matches_transformers(ttnn, full_encoder_case):
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_fusion_encoder_layer

    layer, inputs, want = full_encoder_case
    host = prepare_fusion_encoder_layer(layer, inputs["position"])
    got = run_encoder_layer(Chip(ttnn), host, layer, inputs)
    assert got.shape == want.shape == (1, 72 * 72, 256)
    residual_only = pcc(inputs["vision"], want)
    print(f"full-size fusion encoder layer: PCC {pcc(got, want):.5f} (residual alone {residual_only:.3f})")
    assert residual_only < PCC_GATE - 0.1
    assert pcc(got, want) >= PCC_GATE


def test_fusion_encoder_negative_control_fails_the_gate(ttnn, full_encoder_case):
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_fusion_encoder_layer

    layer, inputs, want = full_encoder_case
    host = swap_key_value(prepare_fusion_encoder_layer(layer, inputs["position"]), "cross_attn.")
    got = run_encoder_layer(Chip(ttnn), host, layer, inputs)
    print(f"full-size fusion encoder layer, cross-attention K/V swapped: PCC {pcc(got, want):.5f}")
    assert pcc(got, want) < PCC_GATE


# decoder ------------------------------------------------------------------------------------
def decoder_case(
    hidden: int, heads: int, intermediate: int, side: int, queries: int, seed: int = 0, batch: int = 1
):
    """A randomised Sam3DetrDecoderLayer, its inputs and transformers' float32 output.

    The box bias is random (std 2, so it steers the vision attention) with the presence row
    zero, as the decoder builds it.
    """
    from transformers.models.sam3.configuration_sam3 import Sam3DETRDecoderConfig
    from transformers.models.sam3.modeling_sam3 import Sam3DetrDecoderLayer

    config = Sam3DETRDecoderConfig(
        hidden_size=hidden, num_attention_heads=heads, intermediate_size=intermediate, num_queries=queries
    )
    config._attn_implementation = "eager"
    layer = Sam3DetrDecoderLayer(config).eval()
    randomise(layer, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    tokens, rows = side * side, 1 + queries
    bias = torch.randn(batch, heads, queries, tokens, generator=generator) * 2
    inputs = {
        "hidden": torch.randn(batch, rows, hidden, generator=generator),
        "query_pos": torch.randn(batch, queries, hidden, generator=generator),
        "text": torch.randn(batch, PROMPT_TOKENS, hidden, generator=generator),
        "valid": prompt_validity(batch=batch),
        "vision": torch.randn(batch, tokens, hidden, generator=generator),
        "vision_pos": torch.randn(1, tokens, hidden, generator=generator),
        "box_bias": torch.nn.functional.pad(bias, (0, 0, 1, 0)),
    }
    text_mask = torch.where(inputs["valid"], 0.0, float("-inf")).reshape(batch, 1, 1, PROMPT_TOKENS)
    with torch.no_grad():
        want = layer(
            inputs["hidden"],
            query_pos=inputs["query_pos"],
            text_features=inputs["text"],
            vision_features=inputs["vision"],
            vision_pos_encoding=inputs["vision_pos"],
            text_cross_attn_mask=text_mask,
            vision_cross_attn_mask=inputs["box_bias"],
        )
    return layer, inputs, want


def run_decoder_layer(chip: Chip, host: dict, layer, inputs: dict) -> torch.Tensor:
    from tt_sam3_ros.engines.ttnn_model.attention import key_padding_mask
    from tt_sam3_ros.engines.ttnn_model.decoder import DecoderInputs, decoder_layer
    from tt_sam3_ros.engines.ttnn_model.prompt_config import PromptLayerConfig, padded_length

    pad = torch.nn.functional.pad
    rows = inputs["hidden"].shape[1]
    padded_rows, padded_text = padded_length(rows), padded_length(inputs["text"].shape[1])
    vision = chip.tensor(inputs["vision"])
    tensors = DecoderInputs(
        query_pos=chip.tensor(pad(inputs["query_pos"], (0, 0, 1, padded_rows - rows))),
        self_mask=chip.tensor(
            key_padding_mask(padded_rows, torch.ones(1, rows, dtype=torch.bool), padded_rows)
        ),
        text=chip.tensor(pad(inputs["text"], (0, 0, 0, padded_text - inputs["text"].shape[1]))),
        text_mask=chip.tensor(key_padding_mask(padded_rows, inputs["valid"], padded_text)),
        vision=vision,
        vision_keyed=chip.ttnn.add(vision, chip.tensor(inputs["vision_pos"])),
        box_bias=chip.tensor(pad(inputs["box_bias"], (0, 0, 0, padded_rows - rows))),
    )
    hidden = chip.tensor(pad(inputs["hidden"], (0, 0, 0, padded_rows - rows)))
    out = decoder_layer(
        chip.ttnn, hidden, tensors, chip.weights(host), PromptLayerConfig.from_layer(layer), chip.settings
    )
    return chip.read(out)[:, :rows]


@pytest.fixture(scope="module")
def full_decoder_case():
    return decoder_case(hidden=256, heads=8, intermediate=2048, side=72, queries=200)


@pytest.mark.parametrize("batch", [1, 2])
def test_decoder_layer_tiny_matches_transformers(ttnn, batch):
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_decoder_layer

    layer, inputs, want = decoder_case(hidden=32, heads=2, intermediate=64, side=8, queries=20, batch=batch)
    got = run_decoder_layer(Chip(ttnn), prepare_decoder_layer(layer), layer, inputs)
    assert got.shape == want.shape
    print(f"tiny decoder layer, {batch} prompt(s): PCC {pcc(got, want):.5f}")
    assert pcc(got, want) >= PCC_GATE


def test_decoder_layer_full_size_matches_transformers(ttnn, full_decoder_case):
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_decoder_layer

    layer, inputs, want = full_decoder_case
    got = run_decoder_layer(Chip(ttnn), prepare_decoder_layer(layer), layer, inputs)
    assert got.shape == want.shape == (1, 201, 256)
    print(f"full-size decoder layer (200 queries + presence in 224 rows): PCC {pcc(got, want):.5f}")
    assert pcc(got, want) >= PCC_GATE


def test_decoder_negative_controls_fail_the_gate(ttnn, full_decoder_case):
    """Swapped K/V in the vision cross-attention, and the box bias left out: both must fail."""
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_decoder_layer

    layer, inputs, want = full_decoder_case
    chip = Chip(ttnn)
    swapped = run_decoder_layer(
        chip, swap_key_value(prepare_decoder_layer(layer), "vision_attn."), layer, inputs
    )
    unbiased = run_decoder_layer(
        chip, prepare_decoder_layer(layer), layer, dict(inputs, box_bias=torch.zeros_like(inputs["box_bias"]))
    )
    print(f"full-size decoder layer, vision K/V swapped: PCC {pcc(swapped, want):.5f}")
    print(f"full-size decoder layer, no box bias: PCC {pcc(unbiased, want):.5f}")
    assert pcc(swapped, want) < PCC_GATE
    assert pcc(unbiased, want) < PCC_GATE


# scoring ------------------------------------------------------------------------------------
def scoring_case(config, seed: int = 0):
    """Randomised Sam3DotProductScoring and decoder heads, inputs, and transformers' logits,
    presence logit and detection scores (sigmoid(logit) * sigmoid(presence)) in float32."""
    from transformers.models.sam3.modeling_sam3 import Sam3DetrDecoder, Sam3DotProductScoring

    decoder_config = config.detr_decoder_config
    scoring, decoder = Sam3DotProductScoring(config).eval(), Sam3DetrDecoder(decoder_config).eval()
    randomise(scoring, seed)
    randomise(decoder, seed + 1)
    generator = torch.Generator().manual_seed(seed + 2)
    rows, hidden = 1 + decoder_config.num_queries, decoder_config.hidden_size
    inputs = {
        "hidden": torch.randn(1, rows, hidden, generator=generator),
        "text": torch.randn(1, PROMPT_TOKENS, hidden, generator=generator),
        "valid": prompt_validity(),
    }
    with torch.no_grad():
        queries = decoder.output_layer_norm(inputs["hidden"][:, 1:])
        logits = scoring(queries[None], inputs["text"], inputs["valid"])[-1]  # (1, queries, 1)
        presence = decoder.presence_head(decoder.presence_layer_norm(inputs["hidden"][:, :1])).squeeze(-1)
        presence = presence.clamp(-decoder.clamp_presence_logit_max_val, decoder.clamp_presence_logit_max_val)
        scores = logits.sigmoid() * presence.sigmoid().reshape(1, 1, 1)
    return (scoring, decoder), inputs, (logits, presence, scores)


def run_scoring(chip: Chip, host: dict, modules, inputs: dict, selector_column: int = 0):
    """Logits (1, queries, 1), presence logit (1, 1) and scores (1, queries, 1) from the device."""
    from tt_sam3_ros.engines.ttnn_model import scoring
    from tt_sam3_ros.engines.ttnn_model.prompt_config import padded_length

    pad = torch.nn.functional.pad
    rows, tokens = inputs["hidden"].shape[1], inputs["text"].shape[1]
    padded_rows, padded_text = padded_length(rows), padded_length(tokens)
    selector = scoring.presence_selector(padded_rows)
    selector[:, :, [0, selector_column]] = selector[:, :, [selector_column, 0]]
    config = scoring.ScoringConfig.from_modules(*modules)
    w = chip.weights(host)
    hidden = chip.tensor(pad(inputs["hidden"], (0, 0, 0, padded_rows - rows)))
    text = chip.tensor(pad(inputs["text"], (0, 0, 0, padded_text - tokens)))
    pool = chip.tensor(scoring.text_pooling_row(inputs["valid"], padded_text))
    logits = scoring.query_logits(chip.ttnn, hidden, text, pool, w, config, chip.settings)
    presence = scoring.presence_logits(chip.ttnn, hidden, w, config, chip.settings)
    scores = scoring.detection_scores(chip.ttnn, logits, presence, chip.tensor(selector), chip.settings)
    real = slice(1, rows)
    return chip.read(logits)[:, real], chip.read(presence)[:, 0], chip.read(scores)[:, real]


def scoring_gate(got: tuple, want: tuple) -> list[str]:
    """What fails the scoring gate: logits and scores PCC >= 0.99, and every score within 1e-2
    (a PCC cannot see the presence factor: it scales every score of a prompt alike)."""
    failures = []
    for name, ours, theirs in (("logits", got[0], want[0]), ("scores", got[2], want[2])):
        if pcc(ours, theirs) < PCC_GATE:
            failures.append(f"{name} PCC {pcc(ours, theirs):.5f}")
    error = float((got[2] - want[2]).abs().max())
    if error > 1e-2:
        failures.append(f"max score error {error:.4f}")
    return failures


@pytest.mark.parametrize("size", ["tiny", "full"])
def test_scoring_matches_transformers(ttnn, size):
    from transformers import Sam3Config

    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_scoring
    from tt_sam3_ros.weights.tiny_model import tiny_sam3_config

    config = tiny_sam3_config() if size == "tiny" else Sam3Config()
    modules, inputs, want = scoring_case(config)
    got = run_scoring(Chip(ttnn), prepare_scoring(*modules), modules, inputs)
    assert got[0].shape == want[0].shape and got[2].shape == want[2].shape
    error = float((got[2] - want[2]).abs().max())
    print(
        f"{size} scoring: logits PCC {pcc(got[0], want[0]):.5f}, scores PCC {pcc(got[2], want[2]):.5f}, "
        f"max score error {error:.4f}, presence logit {float(got[1]):.3f} vs {float(want[1]):.3f}"
    )
    assert not scoring_gate(got, want)
    assert abs(float(got[1]) - float(want[1])) <= 0.05


def test_scoring_negative_controls_fail_the_gate(ttnn):
    """Query and text projections exchanged, and the presence logit read from the first query's
    row instead of the presence token's: both must fail the gate."""
    from transformers import Sam3Config

    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_scoring

    modules, inputs, want = scoring_case(Sam3Config())
    chip, host = Chip(ttnn), prepare_scoring(*modules)
    swapped = dict(host)
    for part in ("weight", "bias"):
        swapped[f"text_proj.{part}"], swapped[f"query_proj.{part}"] = (
            host[f"query_proj.{part}"],
            host[f"text_proj.{part}"],
        )
    for name, got in (
        ("projections swapped", run_scoring(chip, swapped, modules, inputs)),
        ("presence from the wrong row", run_scoring(chip, host, modules, inputs, selector_column=1)),
    ):
        failures = scoring_gate(got, want)
        print(f"full-size scoring, {name}: fails with {failures}")
        assert failures, name


# segmentation head --------------------------------------------------------------------------
def head_case(config, side: int, seed: int = 0):
    """A randomised Sam3MaskDecoder run by transformers (float32) on random FPN maps, with its
    prompt-attended image tokens and pixel embedding captured from inside its forward."""
    from transformers.models.sam3.modeling_sam3 import Sam3MaskDecoder

    head = Sam3MaskDecoder(config.mask_decoder_config).eval()
    randomise(head, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    hidden, queries = config.mask_decoder_config.hidden_size, config.detr_decoder_config.num_queries
    inputs = {
        "fpn": [torch.randn(1, hidden, side * s, side * s, generator=generator) for s in (4, 2, 1)],
        "encoder": torch.randn(1, side * side, hidden, generator=generator),
        "prompt": torch.randn(1, PROMPT_TOKENS, hidden, generator=generator),
        "valid": prompt_validity(),
        "queries": torch.randn(1, queries, hidden, generator=generator),
    }
    captured = {}

    def capture(module, args, output):
        captured["attended"] = args[0][-1].flatten(2).transpose(1, 2)  # (1, S, C)
        captured["pixels"] = output

    hook = head.pixel_decoder.register_forward_hook(capture)
    try:
        with torch.no_grad():
            out = head(
                inputs["queries"],
                inputs["fpn"],
                inputs["encoder"],
                prompt_features=inputs["prompt"],
                prompt_mask=inputs["valid"],
            )
    finally:
        hook.remove()
    return head, inputs, captured, out.pred_masks


@pytest.fixture(scope="module")
def full_head_case():
    from transformers import Sam3Config

    return head_case(Sam3Config(), side=72)


def run_head_attention(chip: Chip, head, inputs: dict) -> torch.Tensor:
    from tt_sam3_ros.engines.ttnn_model.attention import AttentionShape, key_padding_mask
    from tt_sam3_ros.engines.ttnn_model.prompt_config import padded_length
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_segmentation_head
    from tt_sam3_ros.engines.ttnn_model.segmentation_head import prompt_cross_attention

    tokens, prompt = inputs["encoder"].shape[1], inputs["prompt"]
    padded = padded_length(prompt.shape[1])
    attention = head.prompt_cross_attn
    out = prompt_cross_attention(
        chip.ttnn,
        chip.tensor(inputs["encoder"]),
        chip.tensor(torch.nn.functional.pad(prompt, (0, 0, 0, padded - prompt.shape[1]))),
        chip.tensor(key_padding_mask(tokens, inputs["valid"], padded)),
        chip.weights(prepare_segmentation_head(head)),
        AttentionShape.of(attention.hidden_size, attention.num_attention_heads),
        head.prompt_cross_attn_norm.eps,
        chip.settings,
    )
    return chip.read(out)


def run_mask_logits(chip: Chip, head, inputs: dict, pixels: torch.Tensor) -> torch.Tensor:
    """Mask logits (1, queries, H, W) from the device, given the (1, C, H, W) pixel embedding."""
    from tt_sam3_ros.engines.ttnn_model.prompt_config import padded_length
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_segmentation_head
    from tt_sam3_ros.engines.ttnn_model.segmentation_head import mask_embeddings, mask_logits

    queries = inputs["queries"]
    rows = queries.shape[1]
    w = chip.weights(prepare_segmentation_head(head))
    padded = chip.tensor(torch.nn.functional.pad(queries, (0, 0, 0, padded_length(rows) - rows)))
    embeddings = mask_embeddings(chip.ttnn, padded, w, chip.settings)
    height, width = pixels.shape[-2:]
    flat = chip.tensor(pixels.flatten(2).transpose(1, 2).contiguous())  # (1, H*W, C), row-major pixels
    logits = mask_logits(chip.ttnn, embeddings, flat, w, chip.settings)
    return chip.read(logits)[:, :rows].reshape(1, rows, height, width)


def test_segmentation_head_prompt_attention_matches_transformers(ttnn, full_head_case):
    head, inputs, captured, _ = full_head_case
    got = run_head_attention(Chip(ttnn), head, inputs)
    want = captured["attended"]
    residual_only = pcc(inputs["encoder"], want)
    print(
        f"full-size mask head prompt attention: PCC {pcc(got, want):.5f} (residual alone {residual_only:.3f})"
    )
    assert residual_only < PCC_GATE - 0.05
    assert pcc(got, want) >= PCC_GATE


def test_segmentation_head_mask_logits_match_transformers(ttnn, full_head_case):
    """Mask logits at 288 x 288 from transformers' own pixel embedding, against its pred_masks;
    the negative control reads the pixels transposed."""
    head, inputs, captured, want = full_head_case
    chip = Chip(ttnn)
    got = run_mask_logits(chip, head, inputs, captured["pixels"])
    assert got.shape == want.shape == (1, 200, 288, 288)
    transposed = run_mask_logits(chip, head, inputs, captured["pixels"].transpose(-1, -2))
    print(
        f"full-size mask logits: PCC {pcc(got, want):.5f}; pixels transposed: PCC {pcc(transposed, want):.5f}"
    )
    assert pcc(got, want) >= PCC_GATE
    assert pcc(transposed, want) < PCC_GATE


# pixel decoder ------------------------------------------------------------------------------
def _flat_pixels(feature_map: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H*W, C), pixels row-major: the device's flattened NHWC rows."""
    return feature_map.flatten(2).transpose(1, 2).contiguous()


def run_pixel_decoder(chip: Chip, host: dict, head, inputs: dict, attended: torch.Tensor) -> torch.Tensor:
    """The device pixel decoder from transformers' prompt-attended tokens and FPN maps:
    (B, H*W, C) at the finest map's size."""
    from tt_sam3_ros.engines.ttnn_model import segmentation_head as sh
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import PIXEL_DECODER_STAGES

    side = int(attended.shape[1] ** 0.5)
    config = sh.PixelDecoderConfig.from_module(head.pixel_decoder, side, PIXEL_DECODER_STAGES)
    w = {**chip.weights(host), **sh.pixel_decoder_constants(chip.ttnn, chip.device, config)}
    fpn = [chip.tensor(_flat_pixels(level)[None]) for level in inputs["fpn"][:PIXEL_DECODER_STAGES]]
    out = sh.pixel_decoder(
        chip.ttnn, chip.device, chip.tensor(attended), fpn, w, config, chip.settings, {}, chip.ttnn.bfloat8_b
    )
    return chip.read(out)


def test_pixel_decoder_matches_transformers(ttnn, full_head_case):
    """Sam3PixelDecoder at full size (72 -> 144 -> 288, 256 channels) from the tokens and FPN maps
    transformers gave it; negative controls: the 3x3 kernels flipped (a convolution where torch
    correlates) and the two stages' GroupNorms exchanged must fail the gate."""
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_segmentation_head

    head, inputs, captured, _ = full_head_case
    want = _flat_pixels(captured["pixels"])
    chip, host = Chip(ttnn), prepare_segmentation_head(head)
    got = run_pixel_decoder(chip, host, head, inputs, captured["attended"])
    assert got.shape == want.shape == (1, 288 * 288, 256)
    flipped = dict(host)
    for stage in range(2):
        name = f"pixel.{stage}.conv.weight"
        flipped[name] = type(host[name])(host[name].values.flip(-1, -2).contiguous(), "conv")
    swapped = dict(host)
    for part in ("weight", "bias"):
        swapped[f"pixel.0.norm.{part}"], swapped[f"pixel.1.norm.{part}"] = (
            host[f"pixel.1.norm.{part}"],
            host[f"pixel.0.norm.{part}"],
        )
    controls = {
        name: pcc(run_pixel_decoder(chip, bad, head, inputs, captured["attended"]), want)
        for name, bad in (("kernels flipped", flipped), ("norms exchanged", swapped))
    }
    print(
        f"full-size pixel decoder: PCC {pcc(got, want):.5f}; "
        + ", ".join(f"{name}: PCC {value:.5f}" for name, value in controls.items())
    )
    assert pcc(got, want) >= PCC_GATE
    assert all(value < PCC_GATE for value in controls.values()), controls


def test_segmentation_head_end_to_end_tiny_matches_transformers(ttnn):
    """The whole head on the tiny model at the real 72 -> 288 sizes: prompt cross-attention, pixel
    decoder, instance projection and mask logits, against transformers' pred_masks."""
    from tt_sam3_ros.engines.ttnn_model.prompt_config import padded_length
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_segmentation_head
    from tt_sam3_ros.engines.ttnn_model.segmentation_head import mask_embeddings, mask_logits
    from tt_sam3_ros.weights.tiny_model import tiny_sam3_config

    head, inputs, _, want = head_case(tiny_sam3_config(), side=72)
    chip = Chip(ttnn)
    attended = run_head_attention(chip, head, inputs)
    pixels = run_pixel_decoder(chip, prepare_segmentation_head(head), head, inputs, attended)
    queries, rows = inputs["queries"], inputs["queries"].shape[1]
    w = chip.weights(prepare_segmentation_head(head))
    padded = chip.tensor(torch.nn.functional.pad(queries, (0, 0, 0, padded_length(rows) - rows)))
    logits = mask_logits(
        chip.ttnn, mask_embeddings(chip.ttnn, padded, w, chip.settings), chip.tensor(pixels), w, chip.settings
    )
    got = chip.read(logits)[:, :rows].reshape(want.shape)
    print(f"tiny segmentation head end to end ({rows} queries, 288 x 288 logits): PCC {pcc(got, want):.5f}")
    assert got.shape == (1, 20, 288, 288)
    assert pcc(got, want) >= PCC_GATE


def test_pixel_decoder_two_prompts_and_traced_replay_tiny(ttnn):
    """Tiny width at the real sizes, two prompts in one batch (one FPN for both, each its own
    tokens) against transformers run per prompt; then the same path captured as a trace after its
    eager run (conv weights prepared, mask made: no host write left inside) and replayed on new
    tokens written into the same buffer, equal to the eager result on those tokens."""
    from tt_sam3_ros.engines.ttnn_model import segmentation_head as sh
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import PIXEL_DECODER_STAGES, prepare_segmentation_head
    from tt_sam3_ros.weights.tiny_model import tiny_sam3_config

    head, inputs, captured, _ = head_case(tiny_sam3_config(), side=72)
    second = captured["attended"].flip(1)  # another prompt's tokens over the same image
    tokens = torch.cat([captured["attended"], second])
    with torch.no_grad():
        maps = [inputs["fpn"][0], inputs["fpn"][1], second.transpose(1, 2).reshape(1, -1, 72, 72)]
        want = torch.cat([_flat_pixels(captured["pixels"]), _flat_pixels(head.pixel_decoder(maps))])
    chip = Chip(ttnn, trace_region_size=1 << 20)
    got = run_pixel_decoder(chip, prepare_segmentation_head(head), head, inputs, tokens)
    crossed = pcc(got[0], want[1])
    print(
        f"tiny pixel decoder, 2 prompts: PCC {pcc(got[0], want[0]):.5f} / {pcc(got[1], want[1]):.5f} "
        f"(prompt 1 against prompt 2's reference: {crossed:.5f})"
    )
    assert got.shape == want.shape
    assert min(pcc(got[0], want[0]), pcc(got[1], want[1])) >= PCC_GATE
    assert crossed < PCC_GATE

    config = sh.PixelDecoderConfig.from_module(head.pixel_decoder, 72, PIXEL_DECODER_STAGES)
    w = {
        **chip.weights(prepare_segmentation_head(head)),
        **sh.pixel_decoder_constants(ttnn, chip.device, config),
    }
    fpn = [chip.tensor(_flat_pixels(level)[None]) for level in inputs["fpn"][:PIXEL_DECODER_STAGES]]
    buffer, conv_weights = chip.tensor(tokens), {}
    eager = chip.read(
        sh.pixel_decoder(
            ttnn, chip.device, buffer, fpn, w, config, chip.settings, conv_weights, ttnn.bfloat8_b
        )
    )
    trace = ttnn.begin_trace_capture(chip.device, cq_id=0)
    traced = sh.pixel_decoder(
        ttnn, chip.device, buffer, fpn, w, config, chip.settings, conv_weights, ttnn.bfloat8_b
    )
    ttnn.end_trace_capture(chip.device, trace, cq_id=0)
    ttnn.copy_host_to_device_tensor(
        ttnn.from_torch(tokens.flip(0), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT), buffer
    )
    ttnn.execute_trace(chip.device, trace, cq_id=0, blocking=True)
    assert torch.equal(chip.read(traced), eager.flip(0))
    ttnn.release_trace(chip.device, trace)


# fusion encoder stack -----------------------------------------------------------------------
def test_fusion_encoder_stack_matches_transformers(ttnn):
    """Sam3DetrEncoder (3 randomised tiny-width layers, 72 x 72 tokens) from its FPN-shaped input,
    as Sam3Model calls it; the negative control runs the same layers in reverse order."""
    from transformers.models.sam3.configuration_sam3 import Sam3DETREncoderConfig
    from transformers.models.sam3.modeling_sam3 import Sam3DetrEncoder

    from tt_sam3_ros.engines.ttnn_model.attention import key_padding_mask
    from tt_sam3_ros.engines.ttnn_model.fusion_encoder import fusion_encoder
    from tt_sam3_ros.engines.ttnn_model.prompt_config import PromptLayerConfig, padded_length
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_fusion_encoder

    config = Sam3DETREncoderConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_layers=3)
    config._attn_implementation = "eager"
    encoder = Sam3DetrEncoder(config).eval()
    randomise(encoder, 5)
    generator = torch.Generator().manual_seed(6)
    feature_map = torch.randn(1, 32, 72, 72, generator=generator)
    position_map = torch.randn(1, 32, 72, 72, generator=generator)
    prompt, valid = torch.randn(1, PROMPT_TOKENS, 32, generator=generator), prompt_validity()
    with torch.no_grad():
        want = encoder([feature_map], prompt, [position_map], text_mask=valid).last_hidden_state
    chip = Chip(ttnn)
    padded = padded_length(PROMPT_TOKENS)
    host = prepare_fusion_encoder(encoder, position_map.flatten(2).transpose(1, 2))
    reversed_host = {
        name.replace(f"layers.{i}.", f"layers.{2 - i}."): value
        for i in range(3)
        for name, value in host.items()
        if name.startswith(f"layers.{i}.")
    }
    results = []
    for weights in (host, reversed_host):
        out = fusion_encoder(
            ttnn,
            chip.tensor(feature_map.flatten(2).transpose(1, 2)),
            chip.tensor(torch.nn.functional.pad(prompt, (0, 0, 0, padded - PROMPT_TOKENS))),
            chip.tensor(key_padding_mask(72 * 72, valid, padded)),
            chip.weights(weights),
            PromptLayerConfig.from_layer(encoder.layers[0]),
            chip.settings,
            layers=3,
        )
        results.append(pcc(chip.read(out), want))
    print(f"3-layer fusion encoder stack: PCC {results[0]:.5f}; layers reversed: PCC {results[1]:.5f}")
    assert results[0] >= PCC_GATE
    assert results[1] < PCC_GATE


# geometry encoder's class token -----------------------------------------------------------------
def smooth_image(channels: int, side: int, seed: int) -> torch.Tensor:
    """A (1, C, side, side) feature map with structure across the image, as FPN features have
    (low-resolution noise upsampled, plus fine noise): attention to different places reads
    different values, so the image decides the class token (white noise would average out)."""
    generator = torch.Generator().manual_seed(seed)
    low = torch.randn(1, channels, 6, 6, generator=generator) * 2
    smooth = torch.nn.functional.interpolate(low, size=(side, side), mode="bilinear")
    return smooth + 0.5 * torch.randn(1, channels, side, side, generator=generator)


def geometry_case(config, seed: int = 0):
    """A randomised Sam3GeometryEncoder, the sine position encoding of a 72 x 72 level, and a
    function giving transformers' float32 output for an image as the torch engine calls it
    (one padded box: mask False, label 0)."""
    from transformers.models.sam3.modeling_sam3 import Sam3GeometryEncoder, Sam3SinePositionEmbedding

    geometry_config = config.geometry_encoder_config
    geometry_config._attn_implementation = "eager"
    encoder = Sam3GeometryEncoder(geometry_config).eval()
    randomise(encoder, seed)
    hidden = geometry_config.hidden_size
    position = Sam3SinePositionEmbedding(num_position_features=hidden // 2, normalize=True)(
        (1, hidden, 72, 72), "cpu", torch.float32
    )

    def reference(image: torch.Tensor, box: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)):
        with torch.no_grad():
            out = encoder(
                box_embeddings=torch.tensor([[box]]),
                box_mask=torch.zeros(1, 1, dtype=torch.bool),
                box_labels=torch.zeros(1, 1, dtype=torch.long),
                img_feats=(image,),
                img_pos_embeds=(position,),
            )
        return out.last_hidden_state, out.attention_mask

    return encoder, position, reference


def run_class_token(chip: Chip, host: dict, encoder, image: torch.Tensor) -> torch.Tensor:
    """The device's (1, C) class token for a (1, C, H, W) image given as the neck's (1, 1, H*W, C)."""
    from tt_sam3_ros.engines.ttnn_model.geometry_encoder import GeometryConfig, class_token

    channels = image.shape[1]
    vision = chip.tensor(image.flatten(2).transpose(1, 2).reshape(1, 1, -1, channels))
    tile = class_token(
        chip.ttnn, vision, chip.weights(host), GeometryConfig.from_module(encoder), chip.settings
    )
    assert tuple(tile.shape) == (1, 32, channels)
    return chip.read(tile)[:, 0]


@pytest.fixture(scope="module")
def full_geometry_case():
    from transformers import Sam3Config

    return geometry_case(Sam3Config())


def test_geometry_padded_box_never_reaches_the_class_token(full_geometry_case):
    """What the torch engine relies on, in transformers itself: the padded box is masked out and
    overwritten, so any box gives the same class token and only the image changes it."""
    _, _, reference = full_geometry_case
    image = smooth_image(256, 72, seed=1)
    token, mask = reference(image)
    moved, _ = reference(image, (0.3, 0.6, 0.2, 0.5))
    other, _ = reference(smooth_image(256, 72, seed=2))
    assert mask.tolist() == [[True, False]]
    assert torch.equal(token[:, 0], moved[:, 0])
    assert pcc(token[:, 0], other[:, 0]) < PCC_GATE - 0.1


@pytest.mark.parametrize("size", ["tiny", "full"])
def test_geometry_class_token_matches_transformers(ttnn, size, full_geometry_case):
    """Device class token against transformers' (float32) on a structured 72 x 72 image; the token
    of another image is printed beside it and, at full size, must score far below the gate (the
    image matters there; the tiny model's single 32-wide layer barely lets it)."""
    from transformers import Sam3Config

    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_geometry_encoder
    from tt_sam3_ros.weights.tiny_model import tiny_sam3_config

    if size == "full":
        encoder, position, reference = full_geometry_case
    else:
        encoder, position, reference = geometry_case(tiny_sam3_config())
    assert size == "tiny" or encoder.config.to_dict() == Sam3Config().geometry_encoder_config.to_dict()
    channels = encoder.hidden_size
    image = smooth_image(channels, 72, seed=1)
    want = reference(image)[0][:, 0]
    got = run_class_token(Chip(ttnn), prepare_geometry_encoder(encoder, position), encoder, image)
    other = reference(smooth_image(channels, 72, seed=2))[0][:, 0]
    print(
        f"{size} geometry encoder class token ({len(encoder.layers)} layers): PCC {pcc(got, want):.5f}, "
        f"max error {float((got - want).abs().max()):.4f} (another image's token: PCC {pcc(other, want):.3f})"
    )
    assert size == "tiny" or pcc(other, want) < PCC_GATE - 0.1
    assert pcc(got, want) >= PCC_GATE


def test_geometry_negative_control_fails_the_gate(ttnn, full_geometry_case):
    """The image cross-attention's key and value projections swapped in every layer: must fail."""
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_geometry_encoder

    encoder, position, reference = full_geometry_case
    host = prepare_geometry_encoder(encoder, position)
    for index in range(len(encoder.layers)):
        host = swap_key_value(host, f"layers.{index}.cross_attn.")
    image = smooth_image(256, 72, seed=1)
    got = run_class_token(Chip(ttnn), host, encoder, image)
    want = reference(image)[0][:, 0]
    print(f"full-size geometry encoder, cross-attention K/V swapped: PCC {pcc(got, want):.5f}")
    assert pcc(got, want) < PCC_GATE
