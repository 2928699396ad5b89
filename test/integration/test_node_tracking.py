"""Track ids from the /sam3 node in its own process, over real rclpy: stable, never reused.

The tiny random SAM 3 gives the same instances for the same picture, so a replayed sequence of
one picture must keep every id; what changes ids (tracking off, a removed prompt, cleanup) is
driven through the parameter and lifecycle services, as `ros2 param set` and
`ros2 lifecycle set` would.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.sam3_client import Sam3Client, make_image, mask_pixels, module_node, scene
from lifecycle_msgs.msg import Transition

PROMPTS = ["car", "person"]
NODE_PARAMS = {
    "model_id": "tiny-random",
    "prompts": str(PROMPTS),
    "threshold": "0.0",
    "max_instances": "6",
    "max_image_side": "256",
    # track_max_age_s at its default (1 s): frames here come seconds apart on a loaded machine,
    # and tracks age by the node's frames as well as by time, so they outlive the gaps.
}


sam3 = module_node(NODE_PARAMS, "sam3_tracking")


def _ids(detections) -> list[str]:
    return [d.id for d in detections.detections]


def _largest_id_so_far(sam3: Sam3Client) -> int:
    return max(int(d.id) for msg in sam3.detections.values() for d in msg.detections)


def _check_mask_rule(detections, mask) -> None:
    """Pixel value k belongs to the k-th detection of the same frame, whatever the ids are."""
    values = {int(v) for v in np.unique(mask_pixels(mask)) if v}
    assert values and values <= set(range(1, len(detections.detections) + 1))


def test_a_replayed_sequence_keeps_every_id(sam3: Sam3Client) -> None:
    picture = scene(seed=5)
    answers = [sam3.ask(make_image(picture)) for _ in range(4)]
    first = _ids(answers[0][0])
    assert len(first) == 6 and len(set(first)) == 6
    for detections, mask in answers:
        assert _ids(detections) == first
        assert [d.results[0].hypothesis.class_id for d in detections.detections] == [
            d.results[0].hypothesis.class_id for d in answers[0][0].detections
        ]
        _check_mask_rule(detections, mask)


def test_tracking_off_gives_positions_and_back_on_gives_ids_never_seen(sam3: Sam3Client) -> None:
    picture = scene(seed=5)
    before = _largest_id_so_far(sam3)
    assert sam3.set_parameter("tracking", False).successful
    detections, mask = sam3.ask(make_image(picture))
    assert _ids(detections) == [str(k) for k in range(1, 7)]
    _check_mask_rule(detections, mask)
    assert sam3.set_parameter("tracking", True).successful
    detections, _ = sam3.ask(make_image(picture))
    assert min(int(i) for i in _ids(detections)) > before  # tracks restarted: fresh ids only


def test_a_removed_prompt_loses_its_tracks_and_the_others_keep_theirs(sam3: Sam3Client) -> None:
    # Every query of both prompts becomes an instance (threshold 0, 2 x 20 queries), so each
    # prompt has instances whatever the image makes of their scores.
    assert sam3.set_parameter("max_instances", 40).successful
    try:
        picture = scene(seed=5)
        both, _ = sam3.ask(make_image(picture))
        people = {d.id for d in both.detections if sam3.prompt_of(d) == "person"}
        assert sam3.set_parameter("prompts", ["person"]).successful
        only_people, mask = sam3.ask(make_image(picture))
        # The same people keep their ids at new positions; positions alone would be 1..N again.
        assert people and people == set(_ids(only_people))
        assert _ids(only_people) != [str(k) for k in range(1, len(people) + 1)]
        _check_mask_rule(only_people, mask)
        before = _largest_id_so_far(sam3)
        assert sam3.set_parameter("prompts", PROMPTS).successful
        detections, _ = sam3.ask(make_image(picture))
        cars = [int(d.id) for d in detections.detections if sam3.prompt_of(d) == "car"]
        assert cars and min(cars) > before
    finally:
        assert sam3.set_parameter("max_instances", 6).successful


def test_track_settings_out_of_range_are_refused_with_the_old_value_kept(sam3: Sam3Client) -> None:
    assert not sam3.set_parameter("track_min_iou", 0.0).successful
    assert not sam3.set_parameter("track_max_age_s", -1.0).successful
    assert not sam3.set_parameter("track_max_age_frames", 0).successful
    assert sam3.get_parameter("track_min_iou") == pytest.approx(0.3)
    assert sam3.get_parameter("track_max_age_frames") == 3
    assert sam3.set_parameter("track_min_iou", 0.5).successful


def test_cleanup_forgets_the_tracks_and_ids_are_never_given_twice(sam3: Sam3Client) -> None:
    picture = scene(seed=5)
    sam3.ask(make_image(picture))
    before = _largest_id_so_far(sam3)
    for transition in ("DEACTIVATE", "CLEANUP", "CONFIGURE", "ACTIVATE"):
        assert sam3.transition(getattr(Transition, f"TRANSITION_{transition}")), transition
    sam3.wait_for_subscriber()
    detections, _ = sam3.ask(make_image(picture))
    assert min(int(i) for i in _ids(detections)) > before


def test_the_tracking_status_reports_the_processed_interval(sam3: Sam3Client) -> None:
    """`sam3: tracking` on /diagnostics: the camera's processed interval against the ageing rule,
    WARN when frames are further apart than track_max_age_s."""
    picture = scene(seed=5)
    for _ in range(3):
        sam3.ask(make_image(picture))
    status = sam3.next_diagnostics(where=lambda d: d.get("processed_interval_s"))
    interval = float(status["processed_interval_s"])
    assert interval > 0.0 and status["track_max_age_s"] == "1" and status["track_max_age_frames"] == "3"
    assert int(status["tracks_alive"]) >= 1
    assert status["_level"] == (1 if interval > 1.0 else 0), status


def _send_stamped(sam3: Sam3Client, picture: np.ndarray, stamp_ns: int) -> list[str]:
    msg = make_image(picture)
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    sam3.send(msg)
    return _ids(sam3.answer(stamp_ns)[0])


def test_a_static_scene_stamped_1_5_s_apart_keeps_its_ids_at_the_defaults(sam3: Sam3Client) -> None:
    """A slow engine's frames: further apart than track_max_age_s (1 s), the ids stay."""
    import time

    picture = scene(seed=9)
    start = time.time_ns() + 100_000_000_000  # ahead of every earlier frame of the module
    answers = [_send_stamped(sam3, picture, start + k * 1_500_000_000) for k in range(4)]
    assert answers[0] and all(ids == answers[0] for ids in answers), answers
    # Stamp jitter: a frame 5 ms earlier than the newest keeps the tracks too.
    assert _send_stamped(sam3, picture, start + 3 * 1_500_000_000 - 5_000_000) == answers[0]
