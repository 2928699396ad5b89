"""`tracker: sam3` on the /sam3 node in its own process, over real rclpy, with the tiny video model.

Each camera gets a SAM 3 video session; Detection2D.id is SAM 3's object id mapped into the
node's id space; prompt changes keep the other prompts' objects; an engine that cannot serve
SAM 3's tracker is refused with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers.sam3_client import Sam3Client, make_image, mask_pixels, running_node, scene
from lifecycle_msgs.msg import Transition

PROMPTS = ["car", "person"]
#: SAM 3's tracker runs for every object on every frame: slower than the detector alone.
ANSWER_S = 180.0
NODE_PARAMS = {
    "model_id": "tiny-random",
    "tracker": "sam3",
    "engine": "torch",
    "prompts": str(PROMPTS),
    "threshold": "0.0",
    "max_instances": "50",
    "max_image_side": "256",
}


@pytest.fixture
def sam3(tmp_path: Path) -> Iterator[Sam3Client]:
    """A node of each test's own: SAM 3's video session carries every frame and prompt change
    into the next answer, and the refusal test cleans the node up (a node starts in seconds)."""
    with running_node(NODE_PARAMS, tmp_path / "node.log") as client:
        yield client


def _ids(detections) -> list[int]:
    return [int(d.id) for d in detections.detections]


def test_frames_are_served_with_node_ids_for_sam3_objects(sam3: Sam3Client) -> None:
    picture = scene(seed=5)
    answers = [sam3.ask(make_image(picture), ANSWER_S) for _ in range(4)]
    print("ids per answer:", [_ids(detections) for detections, _ in answers])
    assert answers[0][0].detections, "the tiny video model found nothing"
    # A static scene: the later answers carry objects of the first (the id checks below need
    # objects that live past one frame).
    for detections, _ in answers[1:]:
        assert detections.detections and set(_ids(detections)) <= set(_ids(answers[0][0]))
    seen: dict[int, str] = {}
    for detections, mask in answers:
        ids = _ids(detections)
        assert len(ids) == len(set(ids)) and all(i >= 1 for i in ids)  # node ids (SAM 3's start at 0)
        for detection in detections.detections:
            # An id names one object of one prompt for as long as it lives.
            assert seen.setdefault(int(detection.id), sam3.prompt_of(detection)) == sam3.prompt_of(detection)
        values = {int(v) for v in np.unique(mask_pixels(mask)) if v}
        assert values <= set(range(1, len(ids) + 1))  # the mask rule is unchanged
    # An id either names an object seen before or is new: larger than every id given so far.
    given: set[int] = set()
    for detections, _ in answers:
        ids = set(_ids(detections))
        assert all(i in given or i > max(given, default=0) for i in ids)
        given |= ids


def test_a_prompt_change_takes_effect_and_new_objects_get_new_ids(sam3: Sam3Client) -> None:
    """(That the remaining prompts' objects keep their ids is the session's, tested without ROS.)"""
    picture = scene(seed=5)
    both, _ = sam3.ask(make_image(picture), ANSWER_S)
    assert sam3.set_parameter("prompts", ["person"]).successful
    only_people, _ = sam3.ask(make_image(picture), ANSWER_S)
    assert {sam3.prompt_of(d) for d in only_people.detections} <= {"person"}
    before = max(_ids(both) + _ids(only_people), default=0)
    assert sam3.set_parameter("prompts", PROMPTS).successful
    again, _ = sam3.ask(make_image(picture), ANSWER_S)
    print("ids:", _ids(both), "then person only", _ids(only_people), "then both again", _ids(again))
    cars = [int(d.id) for d in again.detections if sam3.prompt_of(d) == "car"]
    assert cars and min(cars) > before  # the car objects come back under new ids


def test_an_engine_that_cannot_serve_sam3_tracking_is_refused(sam3: Sam3Client) -> None:
    for transition in ("DEACTIVATE", "CLEANUP"):
        assert sam3.transition(getattr(Transition, f"TRANSITION_{transition}")), transition
    result = sam3.set_parameter("engine", "ttnn")
    assert not result.successful
    assert "tracker 'sam3' cannot run on the ttnn engine" in result.reason
    assert sam3.get_parameter("engine") == "torch"
