"""Exemplars in the node's parts without ROS: prompt_boxes messages to boxes, the frames kept to
find a stamp in, the concept carried to later frames until cleared, the slot that keeps a request.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vision_msgs.msg import BoundingBox2D, Detection2D, Detection2DArray, ObjectHypothesisWithPose

from tt_sam3_ros.core.class_ids import BOX_ONLY_CLASS_ID
from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.exemplars import Exemplar
from tt_sam3_ros.core.settings import RunSettings
from tt_sam3_ros.ros import messages
from tt_sam3_ros.runtime.exemplar_cache import (
    ANSWERED_FRAMES_KEPT,
    RECEIVED_FRAMES_KEPT,
    ExemplarMemory,
    KeptFrames,
)
from tt_sam3_ros.runtime.pipeline import FrameInput, FramePipeline, Wants
from tt_sam3_ros.runtime.worker import Frame, FrameSlot

S = 1_000_000_000


def detection(box, class_id: str | None, score: float = 1.0) -> Detection2D:
    x1, y1, x2, y2 = box
    result = Detection2D(bbox=BoundingBox2D(size_x=x2 - x1, size_y=y2 - y1))
    result.bbox.center.position.x, result.bbox.center.position.y = (x1 + x2) / 2, (y1 + y2) / 2
    if class_id is not None:
        hypothesis = ObjectHypothesisWithPose()
        hypothesis.hypothesis.class_id, hypothesis.hypothesis.score = class_id, score
        result.results.append(hypothesis)
    return result


def test_prompt_boxes_name_prompts_by_text_or_class_id_and_score_marks_positive() -> None:
    msg = Detection2DArray(
        detections=[
            detection((10, 20, 30, 60), "car"),
            detection((0, 0, 4, 4), "7", score=0.49),  # class id 7 is "person"; below 0.5: negative
            detection((5, 5, 9, 9), ""),
            detection((1, 2, 3, 4), None),  # no result: a positive box-only exemplar
            detection((1, 2, 3, 4), "car", score=float("nan")),
        ]
    )
    boxes = messages.prompt_boxes(msg, {"car": 0, "person": 7})
    assert boxes == [
        Exemplar((10.0, 20.0, 30.0, 60.0), True, "car"),
        Exemplar((0.0, 0.0, 4.0, 4.0), False, "person"),
        Exemplar((5.0, 5.0, 9.0, 9.0), True, None),
        Exemplar((1.0, 2.0, 3.0, 4.0), True, None),
        Exemplar((1.0, 2.0, 3.0, 4.0), False, "car"),
    ]


def test_prompt_boxes_refuse_unknown_names_and_too_many_boxes() -> None:
    with pytest.raises(InputError, match="class_id 'bus' is neither a prompt in force nor a class id"):
        messages.prompt_boxes(Detection2DArray(detections=[detection((0, 0, 1, 1), "bus")]), {"car": 0})
    many = Detection2DArray(detections=[detection((0, 0, 1, 1), "car")] * 17)
    with pytest.raises(InputError, match="17 given, at most 16 allowed"):
        messages.prompt_boxes(many, {"car": 0})


def test_frames_are_found_by_stamp_among_the_received_and_the_answered() -> None:
    memory = ExemplarMemory()
    memory.note_answered(1 * S, "cam", "answered long ago")
    for k in range(RECEIVED_FRAMES_KEPT + 5):
        memory.note_received((10 + k) * S, "cam", f"received {k}")
    assert memory.find(1 * S, "cam") == ("answered long ago", 0)
    newest = RECEIVED_FRAMES_KEPT + 4
    assert memory.find((10 + newest) * S, "cam")[0] == f"received {newest}"
    with pytest.raises(InputError, match=r"no frame stamped 10\.000000000 is kept \(kept: 31"):
        memory.find(10 * S, "cam")  # pushed out by newer frames
    with pytest.raises(InputError, match=r"the boxes name frame_id .other. and the image stamped 1\."):
        memory.find(1 * S, "other")
    with pytest.raises(InputError, match="the header has no stamp"):
        memory.find(0, "cam")
    for k in range(ANSWERED_FRAMES_KEPT):
        memory.note_answered((100 + k) * S, "cam", k)
    with pytest.raises(InputError, match=r"no frame stamped 1\.000000000"):
        memory.find(1 * S, "cam")


def test_forgetting_the_frames_keeps_the_exemplars_in_force() -> None:
    """What the node does while no one publishes boxes: no frame is held, the concept stays."""
    memory = ExemplarMemory()
    memory.note_received(1 * S, "cam", "frame")
    memory.note_answered(1 * S, "cam", "frame")
    _, generation = memory.find(1 * S, "cam")
    assert memory.keep({"car": "tokens"}, generation) and memory.frames_kept == 2
    memory.forget_frames()
    assert memory.frames_kept == 0 and memory.states == {"car": "tokens"}
    with pytest.raises(InputError, match=r"kept: none; .* only while prompt_boxes has a publisher"):
        memory.find(1 * S, "cam")


def test_every_camera_shares_one_byte_budget_and_answered_frames_go_last() -> None:
    frames = KeptFrames(limit_bytes=100)
    front, back = ExemplarMemory("front", frames), ExemplarMemory("back", frames)
    front.note_answered(1 * S, "cam", "front answered", 30)
    for k in range(2, 8):
        (front if k % 2 else back).note_received(k * S, "cam", f"received {k}", 30)
        assert frames.bytes_kept <= 100
    assert front.find(1 * S, "cam")[0] == "front answered", "a received frame outlived an answered one"
    assert back.find(6 * S, "cam")[0] == "received 6" and front.find(7 * S, "cam")[0] == "received 7"
    with pytest.raises(InputError, match=r"no frame stamped 5\..*at most 100 bytes for every camera"):
        front.find(5 * S, "cam")
    back.note_answered(10 * S, "cam", "back answered", 30)
    back.note_answered(11 * S, "cam", "back answered again", 30)
    back.note_answered(12 * S, "cam", "back answered once more", 30)
    assert frames.bytes_kept == 90, "only answered frames should be left, the newest three"
    with pytest.raises(InputError, match=r"no frame stamped 1\."):
        front.find(1 * S, "cam")
    front.note_received(13 * S, "cam", "too big to keep", 101)
    with pytest.raises(InputError, match=r"no frame stamped 13\."):
        front.find(13 * S, "cam")


def test_a_kept_frame_leaves_at_its_age_limit_even_when_no_frame_comes() -> None:
    now = [1000.0]
    frames = KeptFrames(max_age_s=60.0, clock=lambda: now[0])
    memory = ExemplarMemory("cam", frames)
    memory.note_received(1 * S, "cam", "frame", 6_220_800)
    now[0] += 59.0
    assert memory.find(1 * S, "cam")[0] == "frame"
    now[0] += 2.0
    frames.expire()
    assert frames.bytes_kept == 0 and memory.frames_kept == 0
    with pytest.raises(InputError, match=r"kept: none; .* 60 s each"):
        memory.find(1 * S, "cam")


_notes = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["received", "answered"]),
        st.integers(min_value=1, max_value=40),
        st.integers(min_value=0, max_value=400),
        st.floats(min_value=0, max_value=30),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(_notes)
def test_whatever_arrives_the_kept_frames_stay_within_every_limit(notes) -> None:
    """Untrusted streams of frames of any size, from any camera, at any pace."""
    now = [0.0]
    frames = KeptFrames(limit_bytes=1000, max_age_s=60.0, clock=lambda: now[0])
    memories = {name: ExemplarMemory(name, frames) for name in "abc"}
    for camera, kind, stamp, nbytes, pause_s in notes:
        now[0] += pause_s
        note = memories[camera].note_received if kind == "received" else memories[camera].note_answered
        note(stamp * S, "cam", (camera, kind, stamp), nbytes)
        assert frames.bytes_kept <= 1000
        kept = frames.of(camera)
        assert len([k for k in kept if k.kind == "received"]) <= RECEIVED_FRAMES_KEPT
        assert len([k for k in kept if k.kind == "answered"]) <= ANSWERED_FRAMES_KEPT
        assert all(now[0] - k.kept_s <= 60.0 for k in kept)
        # The frame just noted is kept when it fits beside the answered frames (received ones go
        # first, the newest answered last).
        answered_bytes = sum(k.nbytes for k in frames._frames if k.kind == "answered")
        fits = nbytes if kind == "answered" else answered_bytes + nbytes
        if fits <= 1000:
            assert memories[camera].find(stamp * S, "cam")[0][0] == camera


def test_a_clear_wins_over_a_request_still_in_flight() -> None:
    memory = ExemplarMemory()
    memory.note_received(1 * S, "cam", "frame")
    _, generation = memory.find(1 * S, "cam")
    assert memory.keep({"": "tokens"}, generation) and memory.has_box_only
    assert memory.clear() and memory.states == {} and not memory.has_box_only
    assert not memory.keep({"": "late tokens"}, generation)  # drawn before the clear
    assert memory.states == {}


class CarryingSegmenter:
    """Records the keyword arguments of each call; encodes boxes as their count."""

    max_image_side = 4096

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, rgb, prompts, **kwargs):
        from tt_sam3_ros.core.results import SegmentationResult

        self.calls.append(kwargs)
        result = SegmentationResult(rgb.shape[:2], [*prompts, ""], [], {})
        drawn = {"": len(kwargs["boxes"])} if "boxes" in kwargs else {}
        result.exemplars = {**kwargs.get("carried", {}), **drawn}
        return result


class Outputs:
    depth = False

    def __init__(self) -> None:
        self.published = []

    def wants(self) -> Wants:
        return Wants()

    def publish(self, output) -> None:
        self.published.append(output)


def test_a_frame_with_boxes_puts_them_in_force_for_the_frames_after_it() -> None:
    pipeline, segmenter = FramePipeline(), CarryingSegmenter()
    camera = pipeline.make_cameras(())[""]
    settings = RunSettings(prompts=("car",), class_ids=(("car", 0),))
    image = np.zeros((8, 8, 3), np.uint8)
    boxes = (Exemplar((1, 1, 5, 5)),)
    outputs = Outputs()
    asked = FrameInput(lambda side: image, stamp_ns=5 * S, boxes=boxes)
    assert pipeline.process(segmenter, camera, asked, settings, outputs).outcome == "answered"
    assert segmenter.calls[-1] == {"threshold": 0.5, "max_instances": 50, "boxes": list(boxes)}
    assert outputs.published[-1].class_ids == {"car": 0, "": BOX_ONLY_CLASS_ID}
    later = FrameInput(lambda side: image, stamp_ns=6 * S)
    pipeline.process(segmenter, camera, later, settings, outputs)
    assert segmenter.calls[-1]["carried"] == {"": 1}
    camera.exemplars.clear()
    pipeline.process(segmenter, camera, later, settings, outputs)
    assert "carried" not in segmenter.calls[-1]


def test_a_plain_frame_does_not_push_a_pending_request_out_of_the_slot() -> None:
    slot = FrameSlot()
    assert not slot.put(Frame("request", 1.0, boxes=(Exemplar((0, 0, 1, 1)),)))
    assert slot.put(Frame("newer plain frame", 2.0))  # dropped, counted as such by the caller
    assert slot.take().msg == "request"
    assert not slot.put(Frame("plain", 3.0))
    assert slot.put(Frame("request", 4.0, boxes=(Exemplar((0, 0, 1, 1)),)))  # a request replaces it
    assert slot.take().msg == "request"


def test_the_hold_script_matches_instances_by_mask_and_reads_frame_indexed_boxes() -> None:
    import argparse
    import importlib.util
    from pathlib import Path

    from tt_sam3_ros.core.results import Instance, SegmentationResult

    path = Path(__file__).resolve().parents[2] / "tools" / "exemplar_hold.py"
    spec = importlib.util.spec_from_file_location("exemplar_hold", path)
    hold = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hold)

    def result(*crops) -> SegmentationResult:
        made = [Instance("car", 0, 0.9, (0, 0, 4, 4), crop, origin, (8, 8)) for crop, origin in crops]
        return SegmentationResult((8, 8), ["car"], made, {})

    square = np.ones((4, 4), bool)
    carried = result((square, (0, 0)), (square, (4, 4)))
    drawn = result((square, (0, 1)), (square, (0, 4)))  # IoU 12/20 with the first; none with the second
    assert hold.matches(carried, drawn) == (1, pytest.approx(0.6))
    args = argparse.Namespace(
        prompt=["car"], box=["0:1,2,30,40", "5:car=1,1,9,9"], negative_box=["0:=2,2,8,8"]
    )
    assert hold.boxes_by_frame(args) == {
        0: [Exemplar((1.0, 2.0, 30.0, 40.0), True, "car"), Exemplar((2.0, 2.0, 8.0, 8.0), False, None)],
        5: [Exemplar((1.0, 1.0, 9.0, 9.0), True, "car")],
    }
    with pytest.raises(InputError, match="must start with its frame index"):
        hold.boxes_by_frame(argparse.Namespace(prompt=["car"], box=["1,2,30,40"], negative_box=[]))


def test_the_node_reference_states_the_limits_the_code_keeps() -> None:
    from pathlib import Path

    from tt_sam3_ros.runtime import exemplar_cache

    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "node.md").read_text().split())
    assert f"newest {exemplar_cache.RECEIVED_FRAMES_KEPT} received and newest" in text
    assert f"newest {exemplar_cache.ANSWERED_FRAMES_KEPT} answered frames" in text
    assert f"at most {exemplar_cache.KEPT_BYTES_LIMIT // 2**20} MiB for every camera together" in text
    assert f"none for longer than {exemplar_cache.KEPT_AGE_LIMIT_S:.0f} s" in text


def test_a_frame_answered_again_after_its_age_limit_is_kept_anew() -> None:
    """Found by the property above: the second answer of a frame found the first, expired, one
    and kept nothing."""
    now = [0.0]
    frames = KeptFrames(max_age_s=60.0, clock=lambda: now[0])
    memory = ExemplarMemory("cam", frames)
    memory.note_answered(1 * S, "cam", "frame", 10)
    now[0] += 61.0
    memory.note_answered(1 * S, "cam", "frame", 10)
    assert memory.find(1 * S, "cam")[0] == "frame"
