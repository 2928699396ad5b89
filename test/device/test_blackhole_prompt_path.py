"""The chip prompt path on a real p150a: everything after the text encoder on the chip, end to end.

Run with the image-path tests (see DEVICE_VALIDATION.md):
    TT_METAL_TRACE_ALLOC_TRACKING=1 pytest -m device test/device -v -s --timeout 3600
The engine is TtnnEngine(..., prompt_path="chip"): the class token in the image trace, one
prompt trace per bucket of prompt counts. Gates, against the torch engine on the CPU (float32)
with the same weights and the same resized frame:
- decoded outputs: PCC >= 0.99 of the query logits, the boxes and the kept queries' mask logits,
  presence logits within 0.1;
- the end-to-end top mask of each prompt: IoU >= 0.99 with the torch engine's;
- the prompt trace's replay equals the same forward run eagerly (bit for bit);
- latency, each bound its own test: per extra prompt (4 prompts against 1) at most 3 ms, and a
  1080p frame to its mask (Sam3Segmenter, 1 prompt) under 50 ms; both are the project's goals
  and may fail today (the cost model predicts about 10 ms per prompt, benchmarks/).
With seeded random weights (no --sam3-model) the prompt modules are re-drawn at unit gain
(test/support/random_weights.py), so a wrong stage cannot hide behind scores that all sit at 0.25.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.device

PCC_GATE = 0.99
PRESENCE_TOLERANCE = 0.1
TOP_MASK_IOU_GATE = 0.99
PER_PROMPT_GOAL_MS = 3.0
FRAME_TO_MASK_GOAL_MS = 50.0
PROMPTS = ["car", "person", "tree", "dog"]
TOP_QUERIES = 4


def pcc(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64))[0, 1])


def pixels(seed: int) -> np.ndarray:
    """A random resized frame as every engine takes it: uint8 (1008, 1008, 3)."""
    return np.random.default_rng(seed).integers(0, 256, (1008, 1008, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def model(sam3_model, real_weights):
    from random_weights import randomise_prompt_path

    if not real_weights:
        randomise_prompt_path(sam3_model)
    return sam3_model


@pytest.fixture(scope="module")
def tokenizer(blackhole):
    from tt_sam3_ros.tiny_model import clip_tokenizer

    return clip_tokenizer()


def decoded(engine, prompts: list[str]) -> dict[str, np.ndarray]:
    """Logits, boxes, presence of every query and the mask logits of each prompt's best queries
    (the best by the torch engine's scores when `best` is given, so both read the same rows)."""
    batch = engine.decode(engine.encode_image(pixels(5)), engine.encode_prompts(prompts))
    scores = 1 / (1 + np.exp(-batch.logits)) / (1 + np.exp(-batch.presence[:, None]))
    best = np.argsort(-scores, axis=1)[:, :TOP_QUERIES]
    prompt_index = np.repeat(np.arange(len(prompts)), TOP_QUERIES)
    masks = engine.fetch_masks(batch, prompt_index, best.ravel())
    return {
        "logits": batch.logits,
        "boxes": batch.boxes,
        "presence": batch.presence,
        "best": best,
        "masks": masks,
    }


@pytest.fixture(scope="module")
def reference(model, tokenizer):
    """The torch engine on the CPU, float32, on a copy of the model."""
    import copy

    from tt_sam3_ros.engines.torch_engine import TorchEngine

    engine = TorchEngine(copy.deepcopy(model), tokenizer, device="cpu", dtype="float32")
    try:
        return decoded(engine, PROMPTS)
    finally:
        engine.close()


@pytest.fixture(scope="module")
def chip(blackhole, model, tokenizer):
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    started = time.perf_counter()
    engine = TtnnEngine(model, tokenizer, ttnn_module=blackhole, prompt_path="chip", max_prompts=len(PROMPTS))
    print(f"\nchip prompt path engine start: {time.perf_counter() - started:.1f} s; {engine.describe()}")
    started = time.perf_counter()
    engine.warmup()
    buckets = len(engine.prompt_path.buckets)
    print(f"warm-up (image path + {buckets} prompt buckets): {time.perf_counter() - started:.1f} s")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def on_chip(chip):
    return decoded(chip, PROMPTS)


def test_decoded_outputs_match_the_torch_engine(on_chip, reference):
    figures = {name: pcc(on_chip[name], reference[name]) for name in ("logits", "boxes")}
    presence_error = float(np.abs(on_chip["presence"] - reference["presence"]).max())
    same_best = np.array_equal(on_chip["best"], reference["best"])
    print(f"chip vs torch: PCC {figures}, presence error {presence_error:.4f}, same best queries {same_best}")
    assert min(figures.values()) >= PCC_GATE and presence_error <= PRESENCE_TOLERANCE, figures
    if same_best:
        mask_pcc = pcc(on_chip["masks"], reference["masks"])
        print(f"mask logits of the best queries: PCC {mask_pcc:.5f}")
        assert mask_pcc >= PCC_GATE


def test_top_mask_of_each_prompt_matches_the_torch_engine(on_chip, reference):
    ious = []
    for prompt in range(len(PROMPTS)):
        ours = on_chip["masks"][prompt * TOP_QUERIES] > 0
        theirs = reference["masks"][prompt * TOP_QUERIES] > 0
        union = np.count_nonzero(ours | theirs)
        ious.append(np.count_nonzero(ours & theirs) / union if union else 1.0)
    print(f"top-mask IoU per prompt: {np.round(ious, 4)}")
    assert np.array_equal(on_chip["best"][:, 0], reference["best"][:, 0])
    assert min(ious) >= TOP_MASK_IOU_GATE


def test_prompt_trace_replay_equals_eager(chip, blackhole):
    path = chip.prompt_path
    state = chip.encode_image(pixels(6))
    chip.decode(state, chip.encode_prompts(PROMPTS))
    bucket = path.prompts.bucket
    traced = [blackhole.to_torch(t).clone() for t in path.prompts.run(*path._inputs(state))]
    eager = path._forward(
        bucket, path.prompts.features[bucket], path.prompts.masks[bucket], *path._inputs(state)
    )
    mismatched = [
        i
        for i, (a, b) in enumerate(zip(traced, eager, strict=True))
        if not torch.equal(a, blackhole.to_torch(b))
    ]
    for tensor in eager:
        blackhole.deallocate(tensor)
    assert not mismatched, f"outputs {mismatched} differ between the replay and the eager forward"


def _prompt_replay_ms(chip, blackhole, prompts: list[str]) -> float:
    path = chip.prompt_path
    state = chip.encode_image(pixels(8))
    chip.decode(state, chip.encode_prompts(prompts))  # holds these prompts, captures the bucket
    times = []
    for _ in range(20):
        start = time.perf_counter()
        path.prompts.run(*path._inputs(state))
        blackhole.synchronize_device(chip.device)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def test_each_extra_prompt_costs_at_most_3ms(chip, blackhole):
    one = _prompt_replay_ms(chip, blackhole, PROMPTS[:1])
    four = _prompt_replay_ms(chip, blackhole, PROMPTS)
    per_prompt = (four - one) / 3
    print(
        f"prompt trace replay: 1 prompt {one:.2f} ms, 4 prompts {four:.2f} ms; {per_prompt:.2f} ms per extra"
    )
    assert per_prompt <= PER_PROMPT_GOAL_MS


def test_frame_to_mask_under_50ms(chip):
    from tt_sam3_ros.segmenter import Sam3Segmenter

    segmenter = Sam3Segmenter(chip)
    frame = np.random.default_rng(0).integers(0, 256, (1080, 1920, 3), dtype=np.uint8)
    segmenter(frame, PROMPTS[:1], threshold=0.0, max_instances=10)
    times = []
    for _ in range(10):
        start = time.perf_counter()
        segmenter(frame, PROMPTS[:1], threshold=0.0, max_instances=10)
        times.append((time.perf_counter() - start) * 1000)
    median = statistics.median(times)
    print(f"1080p frame to mask (1 prompt, 10 instances): median {median:.1f} ms over 10 frames")
    assert median < FRAME_TO_MASK_GOAL_MS
