"""Exemplar boxes give transformers' Sam3Model results on the same weights and the same boxes.

Reference: Sam3Processor and Sam3Model called the documented way, one concept per call, boxes
as ``input_boxes`` (source-pixel corners through the processor) and ``input_boxes_labels``; a
box-only concept is the processor's text "visual"; a text prompt without boxes gets one padded
box (label -10), as Meta's model runs it. Ours: every concept of a call in one batch, the
boxes given as ``Exemplar`` objects. The model is the tiny architecture with its prompt path
redrawn at unit gain (test/support/random_weights.py), so a box in the wrong place or with the
wrong label moves the outputs well past the gate; the negative controls (labels swapped, x and y
transposed) show it.

Gate: logits, boxes, presence and mask logits within 1e-4; instances' scores within 1e-4 and
mask pixels agreeing on at least 99.9 %.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tt_sam3_ros.core import exemplars, preprocess
from tt_sam3_ros.core.exemplars import Exemplar

SUPPORT = Path(__file__).resolve().parents[1] / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

TOLERANCE = 1e-4
MASK_AGREEMENT = 0.999

#: One call: a prompt refined by a positive and a negative box, a prompt without boxes and a
#: box-only concept of two positive boxes (picture: 240 x 320, a red square at rows 60-140,
#: columns 100-220).
CALL_PROMPTS = ["red square", "person"]
CALL_BOXES = [
    Exemplar((100.0, 60.0, 220.0, 140.0), prompt="red square"),
    Exemplar((10.5, 150.25, 90.0, 230.0), positive=False, prompt="red square"),
    Exemplar((150.0, 20.0, 230.0, 110.0)),
    Exemplar((30.0, 30.0, 70.0, 50.0)),
]


@pytest.fixture(scope="module")
def sharp_model(tiny_model):
    """The tiny model with its prompt path (geometry encoder included) redrawn at unit gain."""
    from random_weights import randomise_prompt_path

    model = copy.deepcopy(tiny_model)
    randomise_prompt_path(model)
    return model.eval()


@pytest.fixture(scope="module")
def sharp_segmenter(sharp_model, tokenizer):
    from tt_sam3_ros.core.segmenter import Sam3Segmenter
    from tt_sam3_ros.engines.torch_engine import TorchEngine

    return Sam3Segmenter(TorchEngine(sharp_model, tokenizer, device="cpu", dtype="float32"))


@pytest.fixture(scope="module")
def processor(tokenizer):
    from transformers import Sam3ImageProcessor, Sam3Processor

    return Sam3Processor(image_processor=Sam3ImageProcessor(), tokenizer=tokenizer)


def concept_boxes(name: str, boxes: list[Exemplar]) -> tuple[list[list[float]], list[int]]:
    mine = [b for b in boxes if (b.prompt or "") == name]
    return [list(b.box) for b in mine], [int(b.positive) for b in mine]


def reference(model, processor, image: np.ndarray, name: str, boxes: list[Exemplar]):
    """Sam3Model's outputs for one concept, called as transformers documents it."""
    corners, labels = concept_boxes(name, boxes)
    text = name or None  # the processor gives a box-only concept the text "visual"
    if corners:
        inputs = processor(
            images=image,
            text=text,
            input_boxes=[corners],
            input_boxes_labels=[labels],
            return_tensors="pt",
        )
        extra = {"input_boxes": inputs["input_boxes"], "input_boxes_labels": inputs["input_boxes_labels"]}
    else:
        inputs = processor(images=image, text=text, return_tensors="pt")
        extra = {"input_boxes": torch.zeros(1, 1, 4), "input_boxes_labels": torch.full((1, 1), -10)}
    with torch.inference_mode():
        return model(
            pixel_values=inputs["pixel_values"],
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            **extra,
        )


def decoded_with_boxes(engine, image_state, image_size, prompts: list[str], boxes: list[Exemplar]):
    """Our engine's raw outputs for one batched call on an encoded image, and the concepts."""
    checked = exemplars.clip_to_image(exemplars.check_exemplars(boxes, prompts), image_size)
    concepts = exemplars.concepts(prompts, checked, image_size)
    with_boxes = [c for c in concepts if len(c.boxes)]
    encoded = iter(
        engine.encode_exemplars(image_state, [c.boxes for c in with_boxes], [c.labels for c in with_boxes])
    )
    states = [next(encoded) if len(c.boxes) else None for c in concepts]
    texts = engine.encode_prompts([c.text for c in concepts])
    return engine.decode(image_state, texts, exemplars=states), concepts


def decoded_for_image(segmenter, image: np.ndarray, prompts: list[str], boxes: list[Exemplar]):
    engine = segmenter.engine
    image_state = engine.encode_image(preprocess.resize_to_model(image))
    decoded, concepts = decoded_with_boxes(engine, image_state, image.shape[:2], prompts, boxes)
    return decoded, [c.name for c in concepts]


def transposed(box: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    """x and y swapped: the box drawn on the image's transpose."""
    return (box[1], box[0], box[3], box[2])


def largest_difference(engine, decoded, index: int, want) -> float:
    """Largest absolute difference over logits, boxes, presence and every mask logit."""
    queries = np.arange(decoded.logits.shape[1])
    masks = engine.fetch_masks(decoded, np.full_like(queries, index), queries)
    return max(
        float(np.abs(decoded.logits[index] - want.pred_logits[0].numpy()).max()),
        float(np.abs(decoded.boxes[index] - want.pred_boxes[0].numpy()).max()),
        abs(float(decoded.presence[index]) - want.presence_logits[0, 0].item()),
        float(np.abs(masks - want.pred_masks[0].numpy()).max()),
    )


def test_boxes_map_to_the_model_exactly_as_sam3_processor_maps_them(processor, rgb_image) -> None:
    corners = [[0.0, 0.0, 320.0, 240.0], [10.5, 150.25, 90.0, 230.0], [100.0, 60.0, 220.0, 140.0]]
    theirs = processor(images=rgb_image, input_boxes=[corners], return_tensors="pt")["input_boxes"][0].numpy()
    ours = exemplars.model_boxes(np.array(corners), rgb_image.shape[:2])
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, theirs)  # bit for bit


def test_one_batched_call_matches_the_reference_concept_by_concept(
    sharp_segmenter, sharp_model, processor, rgb_image
) -> None:
    decoded, names = decoded_for_image(sharp_segmenter, rgb_image, CALL_PROMPTS, CALL_BOXES)
    assert names == ["red square", "person", ""]
    for index, name in enumerate(names):
        want = reference(sharp_model, processor, rgb_image, name, CALL_BOXES)
        difference = largest_difference(sharp_segmenter.engine, decoded, index, want)
        print(f"concept {name!r}: largest difference from the reference {difference:.2e}")
        assert difference < TOLERANCE, f"concept {name!r}: largest difference {difference:.2e}"


@pytest.mark.parametrize(
    "control",
    [
        pytest.param(lambda b: replace(b, positive=not b.positive), id="labels-swapped"),
        pytest.param(
            lambda b: replace(b, box=(b.box[1], b.box[0], b.box[3], b.box[2])), id="boxes-transposed"
        ),
    ],
)
def test_negative_controls_fail_the_gate(sharp_segmenter, sharp_model, processor, rgb_image, control) -> None:
    """The reference gets the boxes as given; ours gets them spoiled: every boxed concept must
    then miss the gate by far."""
    spoiled = [control(b) for b in CALL_BOXES]
    decoded, names = decoded_for_image(sharp_segmenter, rgb_image, CALL_PROMPTS, spoiled)
    for index, name in enumerate(names):
        if not concept_boxes(name, CALL_BOXES)[0]:
            continue
        want = reference(sharp_model, processor, rgb_image, name, CALL_BOXES)
        difference = largest_difference(sharp_segmenter.engine, decoded, index, want)
        print(f"control, concept {name!r}: largest difference from the reference {difference:.2e}")
        assert difference > 100 * TOLERANCE, f"concept {name!r}: only {difference:.2e} apart"


def instance_gaps(result, wants: list) -> tuple[float, float]:
    """(largest score difference, smallest mask-pixel agreement) of the result's instances against
    the reference outputs of its concepts (``wants``, in the result's prompt order).

    Per concept, the k-th best instance's score is compared with the reference's k-th best; its
    mask with the reference mask of the query whose score is nearest (the best agreement among
    queries within the tolerance, so near-ties cannot pair the wrong query)."""
    height, width = result.image_size
    worst_score, worst_mask = 0.0, 1.0
    for index, want in enumerate(wants):
        ours = [i for i in result.instances if i.prompt_index == index]
        assert all(i.prompt == result.prompts[index] for i in ours)
        scores = (want.pred_logits.sigmoid() * want.presence_logits.sigmoid())[0].numpy()
        ranked = np.sort(scores)[::-1][: len(ours)]
        worst_score = max(
            worst_score, float(np.abs(np.array([i.score for i in ours]) - ranked).max(initial=0))
        )
        for instance in ours:
            near = np.nonzero(np.abs(scores - instance.score) < TOLERANCE)[0]
            near = near if len(near) else np.array([int(np.argmin(np.abs(scores - instance.score)))])
            masks = torch.nn.functional.interpolate(
                want.pred_masks[:, near], size=(height, width), mode="bilinear", align_corners=False
            )[0].numpy()
            worst_mask = min(worst_mask, max(float(np.mean(instance.mask == (m > 0))) for m in masks))
    return worst_score, worst_mask


def test_segmenter_instances_follow_the_reference(sharp_segmenter, sharp_model, processor, rgb_image) -> None:
    """Every instance of every concept (threshold 0): prompt, score within 1e-4, mask pixels."""
    result = sharp_segmenter(rgb_image, CALL_PROMPTS, threshold=0.0, max_instances=255, boxes=CALL_BOXES)
    assert result.prompts == ["red square", "person", ""]
    wants = [reference(sharp_model, processor, rgb_image, name, CALL_BOXES) for name in result.prompts]
    assert len(result.instances) == sum(w.pred_logits.shape[1] for w in wants)
    worst_score, worst_mask = instance_gaps(result, wants)
    print(f"{len(result.instances)} instances: worst score difference {worst_score:.2e}, ", end="")
    print(f"mask agreement {worst_mask:.6f}")
    assert worst_score < TOLERANCE and worst_mask >= MASK_AGREEMENT


def test_a_box_only_call_needs_no_prompt(sharp_segmenter, sharp_model, processor, rgb_image) -> None:
    boxes = [Exemplar((150.0, 20.0, 230.0, 110.0)), Exemplar((30.0, 30.0, 70.0, 50.0), positive=False)]
    result = sharp_segmenter(rgb_image, [], threshold=0.0, max_instances=255, boxes=boxes)
    want = reference(sharp_model, processor, rgb_image, "", boxes)
    scores = np.sort((want.pred_logits.sigmoid() * want.presence_logits.sigmoid())[0].numpy())[::-1]
    assert result.prompts == [""] and {i.prompt for i in result.instances} == {""}
    np.testing.assert_allclose([i.score for i in result.instances], scores, atol=TOLERANCE)


def test_exemplars_carried_to_a_later_image_refine_their_prompts_there(sharp_segmenter, rgb_image) -> None:
    """Our extension: the box tokens encoded on one image, with a later image's class token."""
    drawn = sharp_segmenter(rgb_image, CALL_PROMPTS, threshold=0.0, max_instances=255, boxes=CALL_BOXES)
    assert set(drawn.exemplars) == {"red square", ""}
    later = np.ascontiguousarray(rgb_image[::-1])
    settings = {"threshold": 0.0, "max_instances": 255}
    carried = sharp_segmenter(later, ["red square", "person"], carried=drawn.exemplars, **settings)
    text_only = sharp_segmenter(later, ["red square", "person"], **settings)
    assert carried.prompts == ["red square", "person", ""] and text_only.prompts == ["red square", "person"]
    assert set(carried.exemplars) == {"red square", ""}

    def scores(result, prompt: str) -> list[float]:
        return sorted(i.score for i in result.instances if i.prompt == prompt)

    assert scores(carried, "person") == pytest.approx(scores(text_only, "person"), abs=TOLERANCE)
    moved = np.abs(np.array(scores(carried, "red square")) - scores(text_only, "red square"))
    assert moved.max() > 1e-3
    only_person = sharp_segmenter(
        later, ["person"], carried={"red square": drawn.exemplars["red square"]}, **settings
    )
    assert only_person.prompts == ["person"]  # a carried prompt not in the call is left out
