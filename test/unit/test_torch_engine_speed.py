"""The torch engine's speed-ups keep its outputs: masks fetched in any order, image-only stages shared."""

from __future__ import annotations

import numpy as np
import pytest

from tt_sam3_ros.core import preprocess
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


#: encode_image and image_features(vision) run the same float32 ops: anything above rounding is a
#: different computation.
SAME_ATOL = 1e-5
#: The least change of each output (logits, boxes, presence, masks) when the features come from
#: another frame; the tiny model's answers depend on the image (test_tiny_model.py).
OTHER_FRAME_CHANGE = 0.05


def _answers(engine, image_state, prompts) -> dict[str, np.ndarray]:
    """The image features the prompt path kept and what it decodes from them, every query's mask."""
    decoded = engine.decode(image_state, prompts)
    count, queries = decoded.logits.shape
    every = np.repeat(np.arange(count), queries), np.tile(np.arange(queries), count)
    return {
        **{f"fpn_{k}": f.numpy() for k, f in enumerate(image_state.vision.fpn_hidden_states)},
        "class_token": image_state.class_token.numpy(),
        "after_self_attention": image_state.after_self_attention.numpy(),
        "logits": decoded.logits,
        "boxes": decoded.boxes,
        "presence": decoded.presence,
        "masks": engine.fetch_masks(decoded, *every),
    }


def _largest_differences(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, float]:
    return {name: float(np.abs(a[name] - b[name]).max()) for name in a}


def test_image_features_from_vision_equal_encode_image(decoded_pair, tiny_model) -> None:
    """What the ttnn engine feeds in (vision features) gives the same prompt path as encode_image:
    the same feature maps, class token, logits, boxes, presence and masks. Negative control: the
    vision features of another frame change every one of them."""
    import torch
    from frames import random_frame

    engine, _ = decoded_pair
    image, other = (preprocess.resize_to_model(random_frame(seed)) for seed in (3, 4))

    def from_vision(pixels: np.ndarray):
        with torch.inference_mode():
            vision = tiny_model.get_vision_features(
                pixel_values=torch.from_numpy(preprocess.normalise(pixels))
            )
        return engine.image_features(vision)

    prompts = engine.encode_prompts(["car"])
    direct = _answers(engine, engine.encode_image(image), prompts)
    same = _largest_differences(_answers(engine, from_vision(image), prompts), direct)
    control = _largest_differences(_answers(engine, from_vision(other), prompts), direct)
    assert max(same.values()) <= SAME_ATOL, same
    assert min(control.values()) >= OTHER_FRAME_CHANGE, control


def test_compiling_is_refused_off_cuda(tiny_model, tokenizer) -> None:
    import copy

    with pytest.raises(EngineError, match="CUDA"):
        TorchEngine(copy.deepcopy(tiny_model), tokenizer, device="cpu", compile_image_encoder=True)
