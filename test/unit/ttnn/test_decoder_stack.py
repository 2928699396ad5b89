"""The whole DETR decoder (decoder.decoder_stack) through the emulator against transformers'
Sam3DetrDecoder in float32: the glue between layers (reference boxes, the sine query position,
the box relative-position bias computed on the device from each layer's boxes, the box
refinement, the presence token) as well as the layers.

Full size runs all 6 layers (marked slow: about 2 minutes for both tests on 2 quiet cores).

Gate, for every layer: PCC >= 0.99 of the output-normed queries and of the refined boxes
(Sam3Model's pred_boxes, cxcywh), presence logits within 0.1. Negative controls run the same
gate and must fail it: the refinement dropped (box head zeroed), and every layer's box bias
taken from the initial boxes instead of the current ones (stale boxes).
"""

from __future__ import annotations

import pytest
import torch
from test_prompt_layers import PCC_GATE, PROMPT_TOKENS, Chip, pcc, prompt_validity, randomise

#: Presence logits are one number per prompt and layer: a PCC cannot judge them.
PRESENCE_TOLERANCE = 0.1
SIDE = 72
#: At unit gain the box bias has std ~0.6 over 5184 keys and barely moves the vision attention
#: (a bias from stale boxes then passes the gate); x6 gives std ~3.4, so the boxes steer it.
RPB_GAIN = 6.0
#: SAM 3's depth: the whole stack at full size.
FULL_LAYERS = 6


def reference(decoder, inputs: dict) -> dict:
    """transformers' per-layer normed queries (L, B, N, C), refined boxes (L, B, N, 4) and
    presence logits (L, B, 1), as Sam3Model derives pred_boxes from the decoder's outputs."""
    from transformers.models.sam3.modeling_sam3 import inverse_sigmoid

    with torch.no_grad():
        out = decoder(
            vision_features=inputs["vision"],
            text_features=inputs["text"],
            vision_pos_encoding=inputs["vision_pos"],
            text_mask=inputs["valid"],
            spatial_shapes=torch.tensor([[SIDE, SIDE]]),
        )
        queries = out.intermediate_hidden_states
        boxes = (inverse_sigmoid(out.reference_boxes) + decoder.box_head(queries)).sigmoid()
    return {"queries": queries, "boxes": boxes, "presence": out.presence_logits}


def smooth_image_tokens(batch: int, hidden: int, generator: torch.Generator, cells: int = 8) -> torch.Tensor:
    """(batch, SIDE * SIDE, hidden) tokens that vary smoothly over the grid (random 8 x 8 cells,
    bilinearly upsampled), as a real image's do: attention over a box region then reads a
    box-dependent value, where white-noise tokens average to ~0 whatever the boxes (a bias from
    stale boxes would pass the gate)."""
    coarse = 2.0 * torch.randn(batch, hidden, cells, cells, generator=generator)
    fine = torch.nn.functional.interpolate(coarse, size=(SIDE, SIDE), mode="bilinear", align_corners=False)
    return fine.flatten(2).transpose(1, 2).contiguous()


def case_inputs(decoder, batch: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    hidden = decoder.config.hidden_size
    tokens = SIDE * SIDE
    return {
        "vision": smooth_image_tokens(batch, hidden, generator),
        "vision_pos": torch.randn(batch, tokens, hidden, generator=generator),
        "text": torch.randn(batch, PROMPT_TOKENS, hidden, generator=generator),
        "valid": prompt_validity(batch=batch),
    }


def run_stack(
    chip: Chip, decoder, scoring_config, inputs: dict, host: dict | None = None, all_layers: bool = True
) -> dict:
    """The device's per-layer queries, boxes and presence logits, cut to transformers' shapes."""
    from tt_sam3_ros.engines.ttnn_model.attention import key_padding_mask
    from tt_sam3_ros.engines.ttnn_model.decoder import DecoderStackConfig, DecoderStackInputs, decoder_stack
    from tt_sam3_ros.engines.ttnn_model.prompt_config import padded_length
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_decoder

    config = DecoderStackConfig.from_decoder(decoder, SIDE, SIDE)
    host = prepare_decoder(decoder, config) if host is None else host
    padded = padded_length(PROMPT_TOKENS)
    vision = chip.tensor(inputs["vision"])
    stack_inputs = DecoderStackInputs(
        text=chip.tensor(torch.nn.functional.pad(inputs["text"], (0, 0, 0, padded - PROMPT_TOKENS))),
        text_mask=chip.tensor(key_padding_mask(config.rows, inputs["valid"], padded)),
        vision=vision,
        vision_keyed=chip.ttnn.add(vision, chip.tensor(inputs["vision_pos"])),
    )
    w = chip.weights(host)
    out = decoder_stack(chip.ttnn, stack_inputs, w, config, chip.settings, scoring_config, all_layers)
    real = slice(1, 1 + config.queries)
    return {
        "queries": torch.stack([chip.read(q)[:, real] for q in out.queries]),
        "boxes": torch.stack([chip.read(b)[:, real, :4] for b in out.boxes]),
        "presence": torch.stack([chip.read(p)[:, 0] for p in out.presence]),
    }


def gate(got: dict, want: dict) -> list[str]:
    """What fails the gate, layer by layer (empty when it passes)."""
    failures = []
    for layer in range(want["queries"].shape[0]):
        for name in ("queries", "boxes"):
            value = pcc(got[name][layer], want[name][layer])
            if value < PCC_GATE:
                failures.append(f"layer {layer} {name} PCC {value:.5f}")
        error = float((got["presence"][layer] - want["presence"][layer]).abs().max())
        if error > PRESENCE_TOLERANCE:
            failures.append(f"layer {layer} presence error {error:.3f}")
    return failures


def report(label: str, got: dict, want: dict) -> str:
    layers = want["queries"].shape[0]
    parts = [
        f"L{i}: queries {pcc(got['queries'][i], want['queries'][i]):.5f} "
        f"boxes {pcc(got['boxes'][i], want['boxes'][i]):.5f} "
        f"presence err {float((got['presence'][i] - want['presence'][i]).abs().max()):.3f}"
        for i in range(layers)
    ]
    return f"{label}: " + "; ".join(parts)


def scoring_config_for(decoder, sam3_config):
    from transformers.models.sam3.modeling_sam3 import Sam3DotProductScoring

    from tt_sam3_ros.engines.ttnn_model.scoring import ScoringConfig

    return ScoringConfig.from_modules(Sam3DotProductScoring(sam3_config), decoder)


@pytest.mark.parametrize("batch", [1, 2])
def test_tiny_model_decoder_matches_transformers(ttnn, batch):
    """The tiny model's own decoder (2 layers, 20 queries, width 32), end to end."""
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3, tiny_sam3_config

    model = build_tiny_sam3()
    decoder = model.detr_decoder
    decoder.config._attn_implementation = "eager"
    inputs = case_inputs(decoder, batch, seed=3)
    want = reference(decoder, inputs)
    scoring_config = scoring_config_for(decoder, tiny_sam3_config())
    got = run_stack(Chip(ttnn), decoder, scoring_config, inputs)
    assert got["boxes"].shape == want["boxes"].shape
    print(report(f"tiny decoder, {batch} prompt(s)", got, want))
    assert not gate(got, want)


def test_last_layer_only_gives_the_last_layers_results(ttnn):
    """all_layers=False: the last layer's results only, exactly as the full run gives them."""
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3, tiny_sam3_config

    decoder = build_tiny_sam3().detr_decoder
    decoder.config._attn_implementation = "eager"
    inputs = case_inputs(decoder, 1, seed=3)
    scoring_config = scoring_config_for(decoder, tiny_sam3_config())
    chip = Chip(ttnn)
    every = run_stack(chip, decoder, scoring_config, inputs)
    last = run_stack(chip, decoder, scoring_config, inputs, all_layers=False)
    assert every["queries"].shape[0] == decoder.config.num_layers > 1
    for name in ("queries", "boxes", "presence"):
        assert last[name].shape[0] == 1, name
        assert torch.equal(last[name][0], every[name][-1]), name


def full_size_decoder(layers: int, seed: int = 0):
    """Sam3DetrDecoder at SAM 3's width (256, 8 heads, MLP 2048, 200 queries), `layers` deep,
    randomised at unit gain (embeddings too: reference boxes spread over the image)."""
    from transformers.models.sam3.configuration_sam3 import Sam3DETRDecoderConfig
    from transformers.models.sam3.modeling_sam3 import Sam3DetrDecoder

    config = Sam3DETRDecoderConfig(num_layers=layers)
    config._attn_implementation = "eager"
    decoder = Sam3DetrDecoder(config).eval()
    randomise(decoder, seed)
    generator = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for embedding in (decoder.query_embed, decoder.reference_points, decoder.presence_token):
            embedding.weight.copy_(torch.randn(embedding.weight.shape, generator=generator))
        for embed in (decoder.box_rpb_embed_x, decoder.box_rpb_embed_y):
            embed.layer2.weight.mul_(RPB_GAIN)
            embed.layer2.bias.mul_(RPB_GAIN)
    return decoder


def test_box_bias_matches_transformers(ttnn):
    """decoder.box_bias from random boxes against transformers' _get_rpb_matrix (full size), with
    the presence row and padding zero; the negative control gives it the boxes with x and y
    exchanged."""
    from tt_sam3_ros.engines.ttnn_model.decoder import DecoderStackConfig, box_bias
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_decoder

    decoder = full_size_decoder(layers=1)
    config = DecoderStackConfig.from_decoder(decoder, SIDE, SIDE)
    generator = torch.Generator().manual_seed(5)
    boxes = torch.cat(
        [torch.rand(1, 200, 2, generator=generator), 0.05 + 0.6 * torch.rand(1, 200, 2, generator=generator)],
        -1,
    )
    with torch.no_grad():
        want = decoder._get_rpb_matrix(boxes, (torch.tensor(SIDE), torch.tensor(SIDE)))
    chip = Chip(ttnn)
    w = chip.weights(prepare_decoder(decoder, config))
    results = {}
    for label, given in (("boxes", boxes), ("x and y exchanged", boxes[..., [1, 0, 3, 2]])):
        rows = torch.zeros(1, config.rows, 32)
        rows[:, 1:201, :4] = given
        device_boxes = ttnn.from_torch(rows, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=chip.device)
        got = chip.read(box_bias(ttnn, device_boxes, w, config, chip.settings))
        assert got.shape == (1, 8, config.rows, SIDE * SIDE)
        assert float(got[:, :, 0].abs().max()) == 0.0 and float(got[:, :, 201:].abs().max()) == 0.0
        results[label] = pcc(got[:, :, 1:201], want)
    print(
        f"full-size box bias (std {float(want.std()):.2f}): PCC "
        + ", ".join(f"{k} {v:.5f}" for k, v in results.items())
    )
    assert results["boxes"] >= PCC_GATE
    assert results["x and y exchanged"] < PCC_GATE


@pytest.fixture(scope="module")
def full_case():
    from transformers import Sam3Config

    decoder = full_size_decoder(layers=FULL_LAYERS)
    inputs = case_inputs(decoder, batch=1, seed=11)
    return decoder, inputs, reference(decoder, inputs), scoring_config_for(decoder, Sam3Config())


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_full_size_decoder_stack_matches_transformers(ttnn, full_case):
    decoder, inputs, want, scoring_config = full_case
    got = run_stack(Chip(ttnn), decoder, scoring_config, inputs)
    assert got["queries"].shape == want["queries"].shape == (FULL_LAYERS, 1, 200, 256)
    moved = float((want["boxes"][-1] - want["boxes"][0]).abs().mean())
    print(report(f"full-size decoder, {FULL_LAYERS} layers", got, want) + f" (boxes move {moved:.3f})")
    assert not gate(got, want)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_full_size_decoder_negative_controls_fail_the_gate(ttnn, full_case, monkeypatch):
    from tt_sam3_ros.engines.ttnn_model import decoder as device_decoder
    from tt_sam3_ros.engines.ttnn_model.decoder import DecoderStackConfig
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_decoder

    decoder, inputs, want, scoring_config = full_case
    chip = Chip(ttnn)
    host = prepare_decoder(decoder, DecoderStackConfig.from_decoder(decoder, SIDE, SIDE))
    frozen = dict(host)
    for part in ("weight", "bias"):
        name = f"box_head.layer3.{part}"
        frozen[name] = type(host[name])(torch.zeros_like(host[name].values), host[name].kind)
    no_refinement = run_stack(chip, decoder, scoring_config, inputs, frozen)

    first_bias = []
    fresh_bias = device_decoder.box_bias

    def stale_bias(ttnn_module, boxes, w, config, settings):
        if not first_bias:
            first_bias.append(fresh_bias(ttnn_module, boxes, w, config, settings))
        return ttnn_module.add(first_bias[0], 0.0, memory_config=settings.memory)

    monkeypatch.setattr(device_decoder, "box_bias", stale_bias)
    stale = run_stack(chip, decoder, scoring_config, inputs, host)
    for label, got in (("refinement dropped", no_refinement), ("box bias from stale boxes", stale)):
        failures = gate(got, want)
        print(report(f"full-size decoder, {label}", got, want) + f" -> fails with {failures}")
        assert failures, label
