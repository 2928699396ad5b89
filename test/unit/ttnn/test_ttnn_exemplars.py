"""Exemplar boxes on the ttnn engine through the emulator: the host prompt path's geometry encoder
pools the FPN map the chip computed; the chip prompt path refuses boxes.

Gate: PCC >= 0.99 of the decoded logits and boxes of a boxed concept against the torch engine on
the same pixels and boxes (the tiny model with its ViT and geometry encoder scaled up, so boxes
matter); negative control: the chip side given the boxes transposed (x and y swapped) must miss
the same gate.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_ttnn_engine import PCC_GATE, pcc, random_pixels
from test_ttnn_engine import sharp_model as sharp_model  # the fixture

from tt_sam3_ros.engines.base import EngineError
from tt_sam3_ros.errors import InputError
from tt_sam3_ros.exemplars import Exemplar
from tt_sam3_ros.segmenter import Sam3Segmenter

BOXES = np.array([[0.25, 0.7, 0.3, 0.15], [0.75, 0.35, 0.15, 0.3]], dtype=np.float32)  # cx, cy, w, h
LABELS = np.array([1, 0], dtype=np.int64)


def decoded(engine, pixels: np.ndarray, boxes: np.ndarray):
    image = engine.encode_image(pixels)
    exemplars = engine.encode_exemplars(image, [boxes], [LABELS])
    return engine.decode(image, engine.encode_prompts(["bolt"]), exemplars=exemplars)


def test_boxes_on_chip_features_match_the_torch_engine_and_transposed_boxes_do_not(
    emulator, sharp_model, tokenizer
) -> None:
    from tt_sam3_ros.engines.torch_engine import TorchEngine
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    pixels = random_pixels(7)
    with TtnnEngine(sharp_model, tokenizer, ttnn_module=emulator) as chip:
        chip.warmup_image_path()
        ours = decoded(chip, pixels, BOXES)
        transposed = decoded(chip, pixels, np.ascontiguousarray(BOXES[:, [1, 0, 3, 2]]))
    host = TorchEngine(sharp_model, tokenizer, device="cpu", dtype="float32")
    want = decoded(host, pixels, BOXES)
    gates = {}
    for name, got in (("as given", ours), ("boxes transposed", transposed)):
        gates[name] = min(
            pcc(torch.from_numpy(got.logits), torch.from_numpy(want.logits)),
            pcc(torch.from_numpy(got.boxes), torch.from_numpy(want.boxes)),
        )
        print(f"ttnn engine (emulated), exemplars {name}: worst PCC of logits and boxes {gates[name]:.5f}")
    assert gates["as given"] >= PCC_GATE
    assert gates["boxes transposed"] < PCC_GATE


def test_the_chip_prompt_path_refuses_boxes_with_the_reason(emulator, sharp_model, tokenizer) -> None:
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    class TextOnlyPath:
        """A prompt path without a geometry encoder for boxes, as the chip's."""

        dtype = torch.float32

        def close(self) -> None:
            pass

    refusal = "exemplar boxes need the ttnn engine's host prompt path"
    with TtnnEngine(sharp_model, tokenizer, ttnn_module=emulator, prompt_path=TextOnlyPath()) as chip:
        with pytest.raises(EngineError, match=refusal):
            chip.encode_exemplars(object(), [BOXES], [LABELS])
        boxes = [Exemplar((1, 1, 5, 5), prompt="bolt")]
        with pytest.raises(InputError, match="the ttnn engine does not take exemplar boxes as opened"):
            Sam3Segmenter(chip)(np.zeros((8, 8, 3), np.uint8), ["bolt"], boxes=boxes)
