"""Exemplar boxes on ~/prompt_boxes over real rclpy: the stamped frame answered with them, the
concept carried to later frames, an empty array clearing it, bad requests refused with a reason.

One node process (tiny random SAM 3, threshold 0 so every query is an instance: 20 per concept)
serves the module; this process plays the camera and an operator's tool.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
from helpers.sam3_client import log_tail, make_image, running_node, scene, stamp_ns
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_harness import WAIT_LIMIT_S, spin_until
from vision_msgs.msg import BoundingBox2D, Detection2D, Detection2DArray, ObjectHypothesisWithPose

QUERIES = 20  # the tiny model's queries per concept: each one an instance at threshold 0
NODE_PARAMS = {"model_id": "tiny-random", "prompts": "['car']", "threshold": "0.0", "max_instances": "60"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    log_path = tmp_path_factory.mktemp("sam3_exemplars") / "node.log"
    with running_node(NODE_PARAMS, log_path) as sam3:
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        sam3.boxes_pub = sam3.probe.create_publisher(Detection2DArray, "/sam3/prompt_boxes", reliable)
        assert spin_until(sam3.probe, lambda: sam3.boxes_pub.get_subscription_count() > 0, WAIT_LIMIT_S)
        wait_until_the_node_keeps_frames(sam3, sam3.boxes_pub)
        yield sam3


def wait_until_the_node_keeps_frames(client, publisher, attempts: int = 20) -> None:
    """The node keeps frames for boxes once it sees a publisher on prompt_boxes, which discovery
    may tell it later than this side sees the match: send frames, each followed by boxes naming
    its stamp under another frame_id (refused either way, nothing in force), until the refusal
    says the frame was kept."""
    for attempt in range(attempts):
        shown = make_image(scene(40 + attempt))
        client.ask(shown)
        header = copy.deepcopy(shown.header)
        header.frame_id = "probe"
        publisher.publish(prompt_boxes(header, [(1.0, 1.0, 20.0, 20.0, "car", 1.0)]))
        stamp = f"{header.stamp.sec}.{header.stamp.nanosec:09d}"
        status = client.next_diagnostics(20.0, where=lambda d, s=stamp: s in d.get("last_error", ""))
        if "the boxes name frame_id 'probe'" in status["last_error"]:
            return
    raise AssertionError(f"the node kept no frame for boxes after {attempts} frames with a publisher")


def prompt_boxes(header, boxes: list[tuple[float, float, float, float, str, float]]) -> Detection2DArray:
    """A Detection2DArray of (x1, y1, x2, y2, class_id, score) boxes with ``header``."""
    msg = Detection2DArray()
    msg.header = header
    for x1, y1, x2, y2, class_id, score in boxes:
        detection = Detection2D()
        detection.bbox = BoundingBox2D()
        detection.bbox.center.position.x, detection.bbox.center.position.y = (x1 + x2) / 2, (y1 + y2) / 2
        detection.bbox.size_x, detection.bbox.size_y = x2 - x1, y2 - y1
        hypothesis = ObjectHypothesisWithPose()
        hypothesis.hypothesis.class_id, hypothesis.hypothesis.score = class_id, score
        detection.results.append(hypothesis)
        msg.detections.append(detection)
    return msg


def prompts_found(client, detections: Detection2DArray) -> dict[str, int]:
    counts: dict[str, int] = {}
    for detection in detections.detections:
        prompt = client.prompt_of(detection)
        counts[prompt] = counts.get(prompt, 0) + 1
    return counts


def test_a_stamped_frame_is_answered_with_its_boxes_and_later_frames_keep_the_concept(client) -> None:
    first = make_image(scene(1))
    detections, _ = client.ask(first)
    assert prompts_found(client, detections) == {"car": QUERIES}
    key = stamp_ns(first)
    del client.detections[key], client.masks[key]

    boxes = [(10.0, 10.0, 40.0, 30.0, "", 1.0), (50.0, 5.0, 90.0, 60.0, "", 0.1)]  # box-only: + and -
    client.boxes_pub.publish(prompt_boxes(first.header, boxes))
    try:
        again, mask = client.exemplar_answer(key)
        assert again.header == first.header and mask.header == first.header
        assert prompts_found(client, again) == {"car": QUERIES, "": QUERIES}, log_tail(client.log_path)
        assert any(entry.class_name == "" for entry in client.label_infos[-1].class_map)
        # Untracked: its ids are positions, below every track id the live topics carry.
        assert [d.id for d in again.detections] == [str(k) for k in range(1, 2 * QUERIES + 1)]

        later, _ = client.ask(make_image(scene(2)))
        assert prompts_found(client, later) == {"car": QUERIES, "": QUERIES}
        assert key not in client.detections and key not in client.masks, (
            "the answer to the boxes' frame went out on the live topics: their stamps went backwards"
        )
        assert min(int(d.id) for d in later.detections) >= 256, "a track id could be read as a position"

        client.boxes_pub.publish(prompt_boxes(first.header, []))  # an empty array clears
        names = lambda: {e.class_name for e in client.label_infos[-1].class_map}  # noqa: E731
        assert spin_until(client.probe, lambda: "" not in names(), WAIT_LIMIT_S)
        cleared, _ = client.ask(make_image(scene(3)))
        assert prompts_found(client, cleared) == {"car": QUERIES}
    finally:  # whatever failed above, the module's other tests start with no boxes in force
        client.boxes_pub.publish(prompt_boxes(first.header, []))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda header: setattr(header.stamp, "sec", 12), "prompt_boxes refused: no frame stamped 12."),
        (lambda header: setattr(header, "frame_id", "other"), "the boxes name frame_id 'other'"),
    ],
)
def test_boxes_for_a_frame_that_is_not_kept_are_refused_and_the_stream_goes_on(
    client, change, reason
) -> None:
    shown = make_image(scene(4))
    client.ask(shown)
    header = copy.deepcopy(shown.header)
    change(header)
    client.boxes_pub.publish(prompt_boxes(header, [(1.0, 1.0, 20.0, 20.0, "car", 1.0)]))
    status = client.next_diagnostics(where=lambda d: reason in d.get("last_error", ""))
    assert reason in status["last_error"]
    detections, _ = client.ask(make_image(scene(5)))
    assert prompts_found(client, detections) == {"car": QUERIES}


def test_a_box_naming_no_prompt_is_refused_with_the_name_quoted(client) -> None:
    shown = make_image(scene(6))
    client.ask(shown)
    client.boxes_pub.publish(prompt_boxes(shown.header, [(1.0, 1.0, 20.0, 20.0, "bus\x1b[2J", 1.0)]))
    status = client.next_diagnostics(where=lambda d: "bus" in d.get("last_error", ""))
    assert "class_id 'bus\\x1b[2J' is neither a prompt in force" in status["last_error"]
