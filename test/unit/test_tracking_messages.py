"""Tracked results as ROS messages: Detection2D.id is the track id, the mask rule is positional."""

from __future__ import annotations

import numpy as np
from std_msgs.msg import Header

from tt_sam3_ros.core.class_ids import ClassIds
from tt_sam3_ros.core.results import Instance, SegmentationResult
from tt_sam3_ros.core.settings import settings_from
from tt_sam3_ros.core.tracking import InstanceTracker
from tt_sam3_ros.ros import messages
from tt_sam3_ros.ros.parameters import PARAMETERS


def square(score: float, left: int, prompt: str = "car") -> Instance:
    crop = np.ones((10, 10), dtype=bool)
    return Instance(prompt, 0, score, (float(left), 5.0, left + 10.0, 15.0), crop, (5, left), (40, 80))


def test_detection_ids_are_track_ids_and_mask_value_k_is_the_kth_detection() -> None:
    tracker = InstanceTracker()
    tracker.update(SegmentationResult((40, 80), ["car"], [square(0.9, 10)], {}), 0.0)
    # A new, better-scoring object comes first in the frame: position 1, a new track id.
    result = tracker.update(
        SegmentationResult((40, 80), ["car"], [square(0.95, 50), square(0.9, 11)], {}), 0.1
    )
    detections = messages.result_to_detections(result, Header())
    assert [d.id for d in detections.detections] == ["2", "1"]
    labels = result.instance_mask()
    assert labels[10, 55] == 1 and labels[10, 15] == 2  # positions, not track ids
    mask = messages.instance_mask_to_image(labels, Header())
    pixels = np.frombuffer(bytes(mask.data), np.uint8).reshape(40, 80)
    for k, detection in enumerate(detections.detections, start=1):
        box = detection.bbox
        assert pixels[int(box.center.position.y), int(box.center.position.x)] == k


def test_untracked_results_keep_positional_ids() -> None:
    result = SegmentationResult((40, 80), ["car"], [square(0.9, 10), square(0.8, 50)], {})
    assert [d.id for d in messages.result_to_detections(result, Header()).detections] == ["1", "2"]


def test_the_node_settings_carry_the_tracking_parameters() -> None:
    values = {name: (None if name == "prompts" else default) for name, (default, _) in PARAMETERS.items()}
    defaults = settings_from(values)
    assert (defaults.tracking, defaults.track_max_age_s, defaults.track_min_iou) == (True, 1.0, 0.3)
    assert defaults.track_max_age_frames == 3
    changed = settings_from(
        {**values, "tracking": False, "track_max_age_s": 2.5, "track_min_iou": 0.6, "track_max_age_frames": 7}
    )
    assert (changed.tracking, changed.track_max_age_s, changed.track_min_iou) == (False, 2.5, 0.6)
    assert changed.track_max_age_frames == 7


def test_class_id_is_the_labelinfo_key_of_the_prompt() -> None:
    """A consumer looks class_id up in LabelInfo and finds the prompt (vision_msgs' contract)."""
    result = SegmentationResult((40, 80), ["car", "person"], [square(0.9, 10, "car")], {})
    person = Instance("person", 1, 0.8, (50.0, 5.0, 60.0, 15.0), np.ones((10, 10), bool), (5, 50), (40, 80))
    result.instances.append(person)
    for class_ids in (None, {"car": 4, "person": 9}):
        detections = messages.result_to_detections(result, Header(), class_ids)
        names = {
            c.class_id: c.class_name
            for c in messages.label_info(result.prompts, 0.5, Header(), class_ids).class_map
        }
        assert [names[int(d.results[0].hypothesis.class_id)] for d in detections.detections] == [
            "car",
            "person",
        ]


def test_class_ids_stay_with_their_prompts_through_prompt_changes() -> None:
    ids = ClassIds()
    assert ids.assign(("car", "person")) == (("car", 0), ("person", 1))
    assert ids.assign(("dog", "car")) == (("dog", 2), ("car", 0))  # new prompt: next id; car keeps 0
    assert ids.assign(("person",)) == (("person", 1),)


def test_class_ids_restart_from_the_prompts_in_force_when_uint16_runs_out() -> None:
    ids = ClassIds()
    ids.LIMIT = 3
    ids.assign(("a", "b", "c"))
    assert ids.assign(("c", "d")) == (("c", 0), ("d", 1))


def test_the_tracking_status_warns_when_frames_are_further_apart_than_the_max_age() -> None:
    from diagnostic_msgs.msg import DiagnosticStatus

    from tt_sam3_ros.ros.diagnostics import tracking_status

    fast, slow = InstanceTracker(), InstanceTracker()
    waiting = tracking_status("sam3", fast.ageing())
    assert (waiting.level, waiting.name, waiting.message) == (
        DiagnosticStatus.OK,
        "sam3: tracking",
        "waiting for frames",
    )
    for step in range(4):
        frame = SegmentationResult((40, 80), ["car"], [square(0.9, 10)], {})
        fast.update(frame, step * 0.1)
        slow.update(frame, step * 2.5)
    ok = tracking_status("sam3: camera front", fast.ageing())
    assert ok.level == DiagnosticStatus.OK and ok.name == "sam3: camera front: tracking"
    warn = tracking_status("sam3", slow.ageing())
    values = {kv.key: kv.value for kv in warn.values}
    assert warn.level == DiagnosticStatus.WARN and "2.5 s apart" in warn.message
    assert values == {
        "processed_interval_s": "2.500",
        "track_max_age_s": "1",
        "track_max_age_frames": "3",
        "tracks_alive": "1",
    }
