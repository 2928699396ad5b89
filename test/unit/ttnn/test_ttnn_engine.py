"""The Blackhole engine's image path run through the TT-NN emulator (no chip): numerics and the trace.

Gates: PCC >= 0.99 of every FPN map against transformers' own vision encoder on the tiny model
(its ViT weights scaled up so attention errors cannot hide, see sharp_model) and of the decoded
logits and boxes on the unmodified tiny model, with bfloat8_b matmul weights; the traced path
equals the eager path bit for bit; a replay with new pixels gives the new image's features.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

PCC_GATE = 0.99


def pcc(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.flatten().double(), b.flatten().double()
    return float(torch.corrcoef(torch.stack([a, b]))[0, 1])


def random_pixels(seed: int) -> np.ndarray:
    """A resized frame as every engine takes it: uint8 (1008, 1008, 3)."""
    return np.random.default_rng(seed).integers(0, 256, (1008, 1008, 3), dtype=np.uint8)


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


@pytest.fixture(scope="module")
def engine(emulator, sharp_model, tokenizer):
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    built = TtnnEngine(sharp_model, tokenizer, ttnn_module=emulator)
    built.warmup_image_path()
    yield built
    built.close()


def reference_features(model, image: np.ndarray):
    """transformers' vision encoder on the image normalised as Sam3Processor does."""
    from tt_sam3_ros import preprocess

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


def test_trace_replay_equals_eager(engine, emulator, sharp_model, tokenizer):
    pixels = random_pixels(4)
    traced = [f.clone() for f in engine.encode_vision(pixels).fpn_hidden_states]
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    engine.close()  # one owner per chip: the eager engine needs it
    with TtnnEngine(sharp_model, tokenizer, ttnn_module=emulator, use_trace=False) as eager_engine:
        eager = eager_engine.encode_vision(pixels).fpn_hidden_states
        for a, b in zip(traced, eager, strict=True):
            assert torch.equal(a, b)


def test_whole_pipeline_decodes_from_chip_features(emulator, tiny_model, tokenizer, segmenter, rgb_image):
    """Until the prompt path moves to the chip, the host decodes the chip's features; the
    segmenter on this engine finds what it finds on the torch engine."""
    from tt_sam3_ros.engines.torch_engine import TorchEngine
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine
    from tt_sam3_ros.segmenter import Sam3Segmenter

    pixels = random_pixels(5)
    prompts = ["car", "person"]
    with TtnnEngine(tiny_model, tokenizer, ttnn_module=emulator) as chip:
        chip.warmup()
        decoded = chip.decode(chip.encode_image(pixels), chip.encode_prompts(prompts))
        masks = chip.fetch_masks(decoded, np.array([0, 1]), np.array([3, 0]))
        on_chip = Sam3Segmenter(chip)(rgb_image, prompts, threshold=0.0)
    host = TorchEngine(tiny_model, tokenizer, device="cpu", dtype="float32")
    want = host.decode(host.encode_image(pixels), host.encode_prompts(prompts))
    assert decoded.logits.shape == want.logits.shape and decoded.boxes.shape == want.boxes.shape
    assert masks.shape == (2, 288, 288)
    logits_pcc = pcc(torch.from_numpy(decoded.logits), torch.from_numpy(want.logits))
    boxes_pcc = pcc(torch.from_numpy(decoded.boxes), torch.from_numpy(want.boxes))
    print(f"tiny model decoded from chip features: logits PCC {logits_pcc:.5f}, boxes PCC {boxes_pcc:.5f}")
    assert logits_pcc >= PCC_GATE and boxes_pcc >= PCC_GATE

    on_host = segmenter(rgb_image, prompts, threshold=0.0)
    assert len(on_chip.instances) == len(on_host.instances) > 0
    chip_scores = sorted(i.score for i in on_chip.instances)
    host_scores = sorted(i.score for i in on_host.instances)
    assert np.allclose(chip_scores, host_scores, atol=0.02)
    for prompt in prompts:
        assert abs(on_chip.presence[prompt] - on_host.presence[prompt]) < 0.02
