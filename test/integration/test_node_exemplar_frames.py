"""The frames kept for ~/prompt_boxes over real rclpy: held only while the topic has a publisher.

Its own node process: the exemplar tests' shared node has a boxes publisher from its start.
"""

from __future__ import annotations

import time

from helpers.sam3_client import log_tail, make_image, running_node, scene, stamp_ns
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_harness import WAIT_LIMIT_S, spin_until
from test_node_exemplars import NODE_PARAMS, QUERIES, prompt_boxes, prompts_found
from vision_msgs.msg import Detection2DArray

#: A generous bound on each answer: the first frames after start-up come slowly on shared cores.
ANSWER_LIMIT_S = 120.0


def _wait_until_nobody_publishes_boxes(sam3) -> None:
    """The test's premise: no publisher on /sam3/prompt_boxes in the graph, which is what the
    node counts on Humble (its subscriptions cannot count their matched publishers). A publisher
    of an earlier test's process can linger in the graph for a while after it ended."""
    topic = "/sam3/prompt_boxes"
    gone = lambda: sam3.probe.count_publishers(topic) == 0  # noqa: E731
    if not spin_until(sam3.probe, gone, WAIT_LIMIT_S):
        names = [(i.node_namespace, i.node_name) for i in sam3.probe.get_publishers_info_by_topic(topic)]
        raise AssertionError(f"{topic} still has publishers: {names}")


def _publish_until(sam3, publisher, message, where) -> dict[str, str]:
    """Publish ``message`` until a /diagnostics status matches ``where``, within ANSWER_LIMIT_S.

    Our publisher seeing the node's subscription does not mean the node has seen our publisher
    yet (discovery is not symmetric), and a message sent before then is lost; on busy cores
    that gap is long enough to lose the first one.
    """
    deadline = time.monotonic() + ANSWER_LIMIT_S
    while True:
        publisher.publish(message)
        try:
            return sam3.next_diagnostics(timeout_s=3.0, where=where)
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def test_frames_are_kept_for_boxes_only_while_prompt_boxes_has_a_publisher(tmp_path) -> None:
    """A node nobody publishes boxes to holds no frame: boxes for a frame it answered then are
    refused with "kept: none". Once a publisher exists (and the node has had a message from it),
    a frame answered after it is found and answered again with its boxes."""
    # a generous start-up bound: the tiny model loads in seconds, but CI cores may be shared
    with running_node(NODE_PARAMS, tmp_path / "node.log", startup_timeout_s=600.0) as sam3:
        _wait_until_nobody_publishes_boxes(sam3)
        unwatched = make_image(scene(7))
        sam3.ask(unwatched, timeout_s=ANSWER_LIMIT_S)
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        publisher = sam3.probe.create_publisher(Detection2DArray, "/sam3/prompt_boxes", reliable)
        assert spin_until(sam3.probe, lambda: publisher.get_subscription_count() > 0, WAIT_LIMIT_S)
        box_only = [(10.0, 10.0, 40.0, 30.0, "", 1.0)]
        refused = lambda d: "refused" in d.get("last_error", "")  # noqa: E731
        status = _publish_until(sam3, publisher, prompt_boxes(unwatched.header, box_only), refused)
        assert "is kept (kept: none;" in status["last_error"], status["last_error"]
        assert "only while prompt_boxes has a publisher" in status["last_error"]

        watched = make_image(scene(8))
        detections, _ = sam3.ask(watched, timeout_s=ANSWER_LIMIT_S)
        assert prompts_found(sam3, detections) == {"car": QUERIES}
        key = stamp_ns(watched)
        del sam3.detections[key], sam3.masks[key]
        publisher.publish(prompt_boxes(watched.header, box_only))
        again, _ = sam3.exemplar_answer(key, timeout_s=ANSWER_LIMIT_S)  # answered again: kept and found
        box_only_named = lambda: any(e.class_name == "" for e in sam3.label_infos[-1].class_map)  # noqa: E731
        assert spin_until(sam3.probe, box_only_named, WAIT_LIMIT_S)
        assert prompts_found(sam3, again) == {"car": QUERIES, "": QUERIES}, log_tail(sam3.log_path)
