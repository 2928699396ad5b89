"""Exemplar boxes a user sends: refused with the reason, or mapped into the model's square.

The rules (exemplars.py): at most 16 boxes a call; finite coordinates with x2 > x1 and y2 > y1;
clipped to the image, refused when less than a pixel wide or high is left inside it; a named box
must name one of the call's prompts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.exemplars import (
    MAX_BOXES,
    MIN_BOX_SIDE,
    Exemplar,
    check_exemplars,
    clip_to_image,
    concepts,
    model_boxes,
)

SIZE = (240, 320)  # height, width


@pytest.mark.parametrize(
    ("boxes", "message"),
    [
        ([Exemplar((0, 0, 10, 10))] * (MAX_BOXES + 1), f"17 given, at most {MAX_BOXES} allowed"),
        ([Exemplar((math.nan, 0, 10, 10))], "box 0 has a coordinate that is not a finite number"),
        ([Exemplar((0, 0, math.inf, 10))], "not a finite number"),
        ([Exemplar((5, 5, 5, 10))], "box 0 (5, 5, 5, 10) has no area: x2 must exceed x1"),
        ([Exemplar((0, 0, 10, 10)), Exemplar((9, 9, 3, 3))], "box 1 (9, 9, 3, 3) has no area"),
        (
            [Exemplar((0, 0, 10, 10), prompt="bus")],
            "names prompt 'bus', which is not one of this call's prompts",
        ),
        ([Exemplar((0, 0, 10))], "box 0 must be 4 numbers x1, y1, x2, y2"),
        ([Exemplar(("a", 0, 1, 2))], "box 0 must be 4 numbers"),
        ([Exemplar((0, 0, 10, 10), positive="yes")], "positive must be True or False"),
        ([(0, 0, 10, 10)], "box 0 must be an Exemplar, got tuple"),
        ("0,0,10,10", "boxes must be a list of Exemplar"),
    ],
)
def test_bad_boxes_are_refused_with_the_reason(boxes, message) -> None:
    with pytest.raises(InputError) as refused:
        check_exemplars(boxes, ["car"])
    assert message in str(refused.value)


def test_a_hostile_prompt_name_is_quoted_and_bounded() -> None:
    with pytest.raises(InputError) as refused:
        check_exemplars([Exemplar((0, 0, 10, 10), prompt="x\n" * 500)], ["car"])
    text = str(refused.value)
    assert "\n" not in text and "(1000 characters)" in text and len(text) < 300


def test_boxes_past_the_edge_are_clipped_and_boxes_outside_refused() -> None:
    clipped = clip_to_image([Exemplar((-20, 200, 50.5, 400), positive=False, prompt="car")], SIZE)
    assert clipped == [Exemplar((0.0, 200.0, 50.5, 240.0), positive=False, prompt="car")]
    with pytest.raises(InputError, match=r"box 0 \(330, 0, 400, 10\) lies outside the 320x240 image"):
        clip_to_image([Exemplar((330, 0, 400, 10))], SIZE)
    with pytest.raises(InputError, match="less than 1 pixel wide or high inside the 320x240 image"):
        clip_to_image([Exemplar((319.5, 0, 400, 10))], SIZE)


def test_segmenter_refuses_before_any_engine_work(segmenter, rgb_image) -> None:
    with pytest.raises(InputError, match="which is not one of this call's prompts"):
        segmenter(rgb_image, ["car"], boxes=[Exemplar((0, 0, 10, 10), prompt="person")])
    with pytest.raises(InputError, match="lies outside the 320x240 image"):
        segmenter(rgb_image, ["car"], boxes=[Exemplar((400, 0, 500, 10), prompt="car")])
    with pytest.raises(InputError, match="the box-only concept makes 17; at most 16 allowed"):
        segmenter(rgb_image, [f"thing {i}" for i in range(16)], boxes=[Exemplar((0, 0, 10, 10))])
    with pytest.raises(InputError, match="prompts must not be empty"):
        segmenter(rgb_image, [], boxes=[Exemplar((0, 0, 10, 10), prompt="car")])


def test_boxes_attach_to_their_prompt_and_the_rest_form_the_box_only_concept() -> None:
    boxes = check_exemplars(
        [
            Exemplar((0, 0, 32, 24), prompt=" car "),
            Exemplar((160, 120, 320, 240), positive=False),
            Exemplar((32, 24, 64, 48), positive=False, prompt="car"),
        ],
        ["car", "person"],
    )
    batch = concepts(["car", "person"], boxes, SIZE)
    assert [(c.name, c.text, c.labels.tolist()) for c in batch] == [
        ("car", "car", [1, 0]),
        ("person", "person", []),
        ("", "visual", [0]),
    ]
    np.testing.assert_allclose(batch[0].boxes, [[0.05, 0.05, 0.1, 0.1], [0.15, 0.15, 0.1, 0.1]], rtol=1e-6)
    assert batch[1].boxes.shape == (0, 4)
    np.testing.assert_allclose(batch[2].boxes, [[0.75, 0.75, 0.5, 0.5]])


coordinate = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.floats(min_value=-50, max_value=400),
    st.integers(min_value=-(2**40), max_value=2**40),
)
box = st.builds(
    Exemplar,
    st.tuples(coordinate, coordinate, coordinate, coordinate),
    st.booleans(),
    st.sampled_from([None, "", "car", "person", "bus", " car"]),
)
PROPERTY = settings(max_examples=300)


@PROPERTY
@given(boxes=st.lists(box, max_size=MAX_BOXES + 2), height=st.integers(2, 2000), width=st.integers(2, 2000))
def test_any_box_input_is_refused_with_a_reason_or_lands_inside_the_model_square(
    boxes, height, width
) -> None:
    try:
        checked = clip_to_image(check_exemplars(boxes, ["car", "person"]), (height, width))
    except InputError as error:
        assert str(error) and "\n" not in str(error)
        return
    assert len(checked) <= MAX_BOXES
    for exemplar in checked:
        x1, y1, x2, y2 = exemplar.box
        assert x1 >= 0 and x2 <= width and y1 >= 0 and y2 <= height
        assert x2 - x1 >= MIN_BOX_SIDE and y2 - y1 >= MIN_BOX_SIDE
        assert exemplar.prompt in (None, "car", "person")
    for concept in concepts(["car", "person"], checked, (height, width)):
        cx, cy, w, h = concept.boxes.T if len(concept.boxes) else np.zeros((4, 0))
        assert np.all(w > 0) and np.all(h > 0)
        assert np.all(cx - w / 2 >= -1e-6) and np.all(cx + w / 2 <= 1 + 1e-6)
        assert np.all(cy - h / 2 >= -1e-6) and np.all(cy + h / 2 <= 1 + 1e-6)


def corners(x: float, y: float, width: float, height: float) -> tuple[float, float, float, float]:
    return (x, y, x + width, y + height)


near_image = st.floats(min_value=-20, max_value=100)
side = st.floats(min_value=-2, max_value=60)
plausible_box = st.builds(
    Exemplar,
    st.builds(corners, near_image, near_image, side, side),
    st.booleans(),
    st.sampled_from([None, "car"]),
)


@settings(max_examples=8)
@given(boxes=st.lists(plausible_box, min_size=1, max_size=4))
@example(boxes=[Exemplar((5, 5, 40, 30)), Exemplar((-9, 1, 20, 80), positive=False, prompt="car")])
def test_the_segmenter_answers_or_refuses_any_boxes(segmenter, boxes) -> None:
    """Through the whole model (tiny): an InputError with a reason, or a result whose prompts are
    the call's and the box-only concept's."""
    image = np.zeros((60, 80, 3), dtype=np.uint8)
    try:
        result = segmenter(image, ["car"], threshold=0.0, max_instances=5, boxes=boxes)
    except InputError as error:
        assert str(error)
        return
    assert result.prompts == ["car", *([""] if any(not b.prompt for b in boxes) else [])]
    assert len(result.instances) == 5


def test_model_boxes_are_sam3_processor_arithmetic_in_float32() -> None:
    boxes = model_boxes(np.array([[1.0, 2.0, 3.0, 7.0]]), (10, 4))
    assert boxes.dtype == np.float32
    np.testing.assert_array_equal(boxes, np.array([[0.5, 0.45, 0.5, 0.5]], dtype=np.float32))
