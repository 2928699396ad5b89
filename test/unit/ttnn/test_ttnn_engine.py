"""The Blackhole engine's image path run through the TT-NN emulator (no chip): numerics and the trace.

Gates: PCC >= 0.99 of every FPN map against transformers' own vision encoder on the tiny model
(its ViT weights scaled up so attention errors cannot hide, see sharp_model), with bfloat8_b
matmul weights; the traced path equals the eager path bit for bit; a replay with new pixels gives
the new image's features. What the host prompt path decodes from these features:
test_ttnn_decode_from_chip.py.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from compare import pcc
from frames import random_frame

PCC_GATE = 0.99


def random_pixels(seed: int) -> np.ndarray:
    """A resized frame as every engine takes it: uint8 (1008, 1008, 3)."""
    return random_frame(seed, (1008, 1008))


@pytest.fixture(scope="module")
def sharp_model(tiny_model):
    """The tiny model with its ViT and geometry-encoder weights scaled up: at transformers' 0.02
    init the residual stream hides the attention (a wrong RoPE still scored PCC 0.9999), and the
    geometry encoder's class token hardly depends on the image; here neither can hide."""
    model = copy.deepcopy(tiny_model)
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for module in model.geometry_encoder.modules():
            if isinstance(module, torch.nn.Linear):
                std = module.in_features**-0.5
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * std)
                module.bias.copy_(torch.randn(module.bias.shape, generator=generator) * 0.1)
        for module in model.vision_encoder.backbone.modules():
            if isinstance(module, torch.nn.Linear):
                std = 0.12 if module.in_features > 32 else 0.25
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * std)
                module.bias.copy_(torch.randn(module.bias.shape, generator=generator) * 0.05)
            elif isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.2 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.2 * torch.randn(module.bias.shape, generator=generator))
    return model


#: The frame whose maps the eager path gives before the trace is captured.
EAGER_SEED = 4


@pytest.fixture(scope="module")
def traced_and_eager(emulator, sharp_model, tokenizer):
    """The traced engine every test here shares, and the FPN maps its eager path gave for
    random_pixels(EAGER_SEED) before the trace was captured (as warm-up compiles every program
    eagerly first): one chip has one owner, so the eager run cannot come from a second engine
    while this one is open."""
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    built = TtnnEngine(sharp_model, tokenizer, ttnn_module=emulator)
    host_input = built._host_input(random_pixels(EAGER_SEED))
    eager = [
        f.clone() for f in built._vision_output(built.image_encoder.run_eager(host_input)).fpn_hidden_states
    ]
    built.warmup_image_path()
    yield built, eager
    built.close()


@pytest.fixture(scope="module")
def engine(traced_and_eager):
    return traced_and_eager[0]


def reference_features(model, image: np.ndarray):
    """transformers' vision encoder on the image normalised as Sam3Processor does."""
    from tt_sam3_ros.core import preprocess

    with torch.no_grad():
        return model.get_vision_features(pixel_values=torch.from_numpy(preprocess.normalise(image)))


def test_image_features_match_transformers(engine, sharp_model):
    pixels = random_pixels(1)
    features = engine.encode_vision(pixels)
    reference = reference_features(sharp_model, pixels)
    assert len(features.fpn_hidden_states) == len(reference.fpn_hidden_states) == 4
    for ours, theirs in zip(features.fpn_hidden_states, reference.fpn_hidden_states, strict=True):
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        print(f"tiny model FPN map {tuple(ours.shape)}, bfloat8_b weights: PCC {pcc(ours, theirs):.5f}")
        assert pcc(ours, theirs) >= PCC_GATE, (tuple(ours.shape), pcc(ours, theirs))
    for ours, theirs in zip(features.fpn_position_encoding, reference.fpn_position_encoding, strict=True):
        assert torch.equal(ours, theirs)


def test_image_trace_ends_with_the_geometry_class_token(engine):
    """The image trace's last output is the geometry encoder's class token of that frame: it
    matches the host prompt path's own class token made from the same FPN maps (read back), and
    it changes from frame to frame as the host's does (the tiny model's token is mostly image-
    independent, so the change is what shows the image reached it: a token that ignored the image
    or read another map would fail there)."""
    host = engine.prompt_path
    tokens, hosts = [], []
    for seed in (6, 7):
        # Noise frames all look alike to the model: these differ in what is where.
        generator = torch.Generator().manual_seed(seed)
        coarse = torch.rand(1, 3, 3, 3, generator=generator) * 2 - 1
        pixels = torch.nn.functional.interpolate(coarse, size=(1008, 1008), mode="bilinear")
        frame = ((pixels[0].permute(1, 2, 0) + 1) * 127.5).round().to(torch.uint8).numpy()
        features = engine.encode_vision(frame)
        outputs = engine._trace.outputs
        assert len(outputs) == 5 and tuple(outputs[-1].shape) == (1, 32, engine.config.fpn_dim)
        tokens.append(engine.ttnn.to_torch(outputs[-1]).float()[:, 0])
        hosts.append(host.image_features(features).class_token[:, 0])
    scores = [pcc(ours, theirs) for ours, theirs in zip(tokens, hosts, strict=True)]
    change = pcc(tokens[0] - tokens[1], hosts[0] - hosts[1])
    print(
        f"tiny model class token from the image trace: PCC {min(scores):.5f}; its change between two "
        f"frames vs the host's: PCC {change:.5f} (the two frames' tokens: PCC {pcc(*hosts):.4f})"
    )
    assert min(scores) >= PCC_GATE and change >= PCC_GATE


def test_one_replay_per_frame_sees_the_new_pixels(engine, sharp_model):
    device = engine.device
    replays, captured = device.replays, engine._trace.trace_id
    copies = device.op_log.count("copy")
    first = [f.clone() for f in engine.encode_vision(random_pixels(2)).fpn_hidden_states]
    second = engine.encode_vision(random_pixels(3)).fpn_hidden_states
    assert device.replays == replays + 2 and engine._trace.trace_id is captured  # no re-capture
    # Each frame went up on queue 1 into the staging buffer, then was copied into the trace's input.
    assert device.num_command_queues == 2 and len(engine._trace.staging) == 1
    assert device.op_log.count("copy") == copies + 2
    reference = reference_features(sharp_model, random_pixels(3)).fpn_hidden_states
    for old, new, want in zip(first, second, reference, strict=True):
        assert pcc(new, want) >= PCC_GATE
        assert pcc(old, want) < 0.9  # the first frame's features are not served again


def test_the_next_frame_uploads_while_the_current_one_replays(engine):
    """TtnnEngine.prefetch of frame N+1 after frame N's replay and before its maps are read
    (queue 1 uploads while queue 0 replays) serves each frame the maps it gets one frame at a
    time, the prefetched frame is replayed without a second upload, and the emulator sees no
    queue race."""
    from tt_sam3_ros.engines.ttnn_model.neck import level_sides

    sides = level_sides(engine.config)
    frames = [random_pixels(seed) for seed in (20, 21, 22)]
    one_at_a_time = [[f.clone() for f in engine.encode_vision(p).fpn_hidden_states] for p in frames]
    uploads, trace = [], engine._trace
    stage = trace.stage
    trace.stage = lambda *host_inputs: uploads.append(host_inputs) or stage(*host_inputs)
    try:
        for index, frame in enumerate(frames):
            outputs = engine._run_image_path(frame)
            if index + 1 < len(frames):
                engine.prefetch(frames[index + 1])  # up on queue 1 while frame N replays
            maps = [engine._read_level(t, side) for t, side in zip(outputs[: len(sides)], sides, strict=True)]
            assert all(torch.equal(a, b) for a, b in zip(maps, one_at_a_time[index], strict=True)), index
    finally:
        del trace.stage
    assert len(uploads) == len(frames)  # one upload per frame: a prefetched one is not sent again


def test_trace_replay_equals_eager(traced_and_eager):
    engine, eager = traced_and_eager
    traced = engine.encode_vision(random_pixels(EAGER_SEED)).fpn_hidden_states
    assert engine._trace.captured
    for a, b in zip(traced, eager, strict=True):
        assert torch.equal(a, b)
