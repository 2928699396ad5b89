"""The torch engine's speed-ups keep its outputs: masks fetched in any order, image-only stages shared."""

from __future__ import annotations

import numpy as np
import pytest

from tt_sam3_ros import preprocess
from tt_sam3_ros.engines.base import EngineError
from tt_sam3_ros.engines.torch_engine import TorchEngine


@pytest.fixture(scope="module")
def decoded_pair(tiny_model, tokenizer):
    """An engine and its outputs for three prompts on one image."""
    rows, cols = np.mgrid[0:120, 0:160]
    image = np.stack([rows * 2, cols, rows + cols], axis=-1).astype(np.uint8)
    engine = TorchEngine(tiny_model, tokenizer, device="cpu", dtype="float32")
    pixels = preprocess.resize_to_model(image)
    decoded = engine.decode(engine.encode_image(pixels), engine.encode_prompts(["car", "person", "dog"]))
    return engine, decoded


def test_masks_of_mixed_prompts_come_back_in_the_order_asked(decoded_pair) -> None:
    """Selections interleave prompts (they are sorted by score); each mask must be its own query's."""
    engine, decoded = decoded_pair
    count, queries = decoded.logits.shape
    every = engine.fetch_masks(
        decoded, np.repeat(np.arange(count), queries), np.tile(np.arange(queries), count)
    ).reshape(count, queries, 288, 288)
    prompt_index = np.array([2, 0, 2, 1, 0, 2])
    query_index = np.array([5, 3, 0, 19, 3, 7])
    picked = engine.fetch_masks(decoded, prompt_index, query_index)
    assert picked.shape == (6, 288, 288) and picked.dtype == np.float32
    np.testing.assert_allclose(picked, every[prompt_index, query_index], atol=1e-5)


def test_image_features_from_vision_equal_encode_image(decoded_pair, tiny_model) -> None:
    """What the ttnn engine feeds in (vision features) gives the same prompt path as encode_image."""
    import torch

    engine, _ = decoded_pair
    image = np.random.default_rng(3).integers(0, 256, (1008, 1008, 3), dtype=np.uint8)
    direct = engine.encode_image(image)
    with torch.inference_mode():
        vision = tiny_model.get_vision_features(pixel_values=torch.from_numpy(preprocess.normalise(image)))
    built = engine.image_features(vision)
    prompts = engine.encode_prompts(["car"])
    np.testing.assert_allclose(
        engine.decode(built, prompts).logits, engine.decode(direct, prompts).logits, atol=1e-6
    )


def test_compiling_is_refused_off_cuda(tiny_model, tokenizer) -> None:
    import copy

    with pytest.raises(EngineError, match="CUDA"):
        TorchEngine(copy.deepcopy(tiny_model), tokenizer, device="cpu", compile_image_encoder=True)
