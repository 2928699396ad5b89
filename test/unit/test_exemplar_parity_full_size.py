"""Exemplar boxes at full size: transformers' Sam3Model(Sam3Config()) with random weights (its
prompt path, geometry encoder included, redrawn at unit gain), our batched call against the
reference called one concept at a time, with the negative controls of test_exemplar_parity.py.

Slow (marked `slow`): three runs of the full image encoder on the CPU (ours for the engine-level
comparison, ours inside one Sam3Segmenter call, the reference's once, shared by its calls
through ``vision_embeds``); about 6 GB of memory. The engine-level differences came within
1e-4 by a thin margin (largest 9.7e-05), the instance scores within 2.1e-07.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tt_sam3_ros.core import preprocess

SUPPORT = Path(__file__).resolve().parents[1] / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

from test_exemplar_parity import (  # noqa: E402  (after the support path)
    CALL_BOXES,
    CALL_PROMPTS,
    MASK_AGREEMENT,
    TOLERANCE,
    concept_boxes,
    decoded_with_boxes,
    instance_gaps,
    largest_difference,
    transposed,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

#: The full-size model's mask logits, batched against the reference called one concept at a
#: time: float32 sums in another order through the whole model. Measured: up to 9.7e-5 with torch on
#: two threads, 1.03e-4 on one (the box-only concept), so the tiny model's 1e-4 had no margin;
#: the spoilt boxes stay more than 100 times the tiny gate away (asserted below).
FULL_SIZE_TOLERANCE = 3e-4


@pytest.fixture(scope="module")
def full_size(tokenizer, module_rgb_image):
    """(segmenter, model, processor, the reference's vision features of the picture)."""
    from random_weights import full_size_sam3, randomise_prompt_path
    from transformers import Sam3ImageProcessor, Sam3Processor

    from tt_sam3_ros.core.segmenter import Sam3Segmenter
    from tt_sam3_ros.engines.torch_engine import TorchEngine

    model = full_size_sam3(seed=5)
    randomise_prompt_path(model)
    processor = Sam3Processor(image_processor=Sam3ImageProcessor(), tokenizer=tokenizer)
    pixels = processor(images=module_rgb_image, return_tensors="pt")["pixel_values"]
    with torch.inference_mode():
        vision = model.get_vision_features(pixel_values=pixels)
    segmenter = Sam3Segmenter(TorchEngine(model, tokenizer, device="cpu", dtype="float32"))
    return segmenter, model, processor, vision


def reference(full_size, name: str, boxes):
    _, model, processor, vision = full_size
    corners, labels = concept_boxes(name, boxes)
    inputs = processor(text=name or "visual", return_tensors="pt")
    if corners:
        boxes_in = processor(
            original_sizes=[[240, 320]],
            input_boxes=[corners],
            input_boxes_labels=[labels],
            return_tensors="pt",
        )
        extra = {"input_boxes": boxes_in["input_boxes"], "input_boxes_labels": boxes_in["input_boxes_labels"]}
    else:
        extra = {"input_boxes": torch.zeros(1, 1, 4), "input_boxes_labels": torch.full((1, 1), -10)}
    with torch.inference_mode():
        return model(
            vision_embeds=vision,
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            **extra,
        )


def test_full_size_batched_call_matches_and_controls_fail(full_size, module_rgb_image) -> None:
    engine = full_size[0].engine
    image_state = engine.encode_image(preprocess.resize_to_model(module_rgb_image))
    spoilers = {
        "as given": lambda b: b,
        "labels swapped": lambda b: replace(b, positive=not b.positive),
        "boxes transposed": lambda b: replace(b, box=transposed(b.box)),
    }
    wants = {}
    for case, spoil in spoilers.items():
        boxes = [spoil(b) for b in CALL_BOXES]
        decoded, concepts = decoded_with_boxes(engine, image_state, (240, 320), CALL_PROMPTS, boxes)
        for index, concept in enumerate(concepts):
            if case != "as given" and not len(concept.boxes):
                continue
            if concept.name not in wants:
                wants[concept.name] = reference(full_size, concept.name, CALL_BOXES)
            difference = largest_difference(engine, decoded, index, wants[concept.name])
            print(f"full size, {case}, concept {concept.name!r}: largest difference {difference:.2e}")
            if case == "as given":
                assert difference < FULL_SIZE_TOLERANCE
            else:
                assert difference > 100 * TOLERANCE


def test_full_size_segmenter_instances_follow_the_reference(full_size, module_rgb_image) -> None:
    """The best 255 instances of the three concepts (threshold 0): scores and mask pixels."""
    segmenter = full_size[0]
    result = segmenter(module_rgb_image, CALL_PROMPTS, threshold=0.0, max_instances=255, boxes=CALL_BOXES)
    wants = [reference(full_size, name, CALL_BOXES) for name in result.prompts]
    assert len(result.instances) == 255
    worst_score, worst_mask = instance_gaps(result, wants)
    print(
        f"full size, 255 instances: worst score difference {worst_score:.2e}, mask agreement {worst_mask:.6f}"
    )
    assert worst_score < TOLERANCE and worst_mask >= MASK_AGREEMENT
