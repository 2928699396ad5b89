"""Track ids as a user of a stream of frames sees them: stable, new for new objects, never reused."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.results import Instance, SegmentationResult
from tt_sam3_ros.core.tracking import STAMP_JUMP_BACK_S, InstanceTracker, TrackIdSpace, crop_iou

SIZE = (480, 640)
DT = 0.1  # 10 frames per second


def blob(x: float, y: float, prompt: str = "car", score: float = 0.9, side: int = 40, size=SIZE) -> Instance:
    """A square object whose top-left corner is at (x, y), clipped to the image."""
    x1, y1 = max(0, int(x)), max(0, int(y))
    x2, y2 = min(size[1], int(x) + side), min(size[0], int(y) + side)
    crop = np.ones((max(0, y2 - y1), max(0, x2 - x1)), dtype=bool)
    return Instance(prompt, 0, score, (float(x1), float(y1), float(x2), float(y2)), crop, (y1, x1), size)


def frame(*instances: Instance, prompts=("car", "person"), size=SIZE) -> SegmentationResult:
    ordered = sorted(instances, key=lambda i: -i.score)
    return SegmentationResult(size, list(prompts), ordered, {p: 0.9 for p in prompts})


def ids(result: SegmentationResult) -> list[int]:
    return [i.track_id for i in result.instances]


def by_prompt_and_x(result: SegmentationResult) -> dict[tuple[str, float], int]:
    return {(i.prompt, i.box[0]): i.track_id for i in result.instances}


def test_ids_are_stable_while_an_object_moves_and_through_a_missed_frame() -> None:
    tracker = InstanceTracker(max_age_s=0.5, min_iou=0.3)
    seen = []
    for step in range(8):
        objects = [] if step in (3, 4) else [blob(100 + 12 * step, 200)]  # two missed detections
        seen.extend(ids(tracker.update(frame(*objects), step * DT)))
    assert seen == [1] * 6


def test_every_instance_gets_an_id_unique_in_its_frame_and_order_is_kept() -> None:
    tracker = InstanceTracker()
    result = frame(blob(10, 10, score=0.9), blob(300, 10, score=0.8), blob(10, 300, "person", score=0.7))
    tracked = tracker.update(result, 0.0)
    assert ids(tracked) == [1, 2, 3]
    assert [i.box for i in tracked.instances] == [i.box for i in result.instances]
    assert np.array_equal(tracked.instance_mask(), result.instance_mask())  # mask rule unchanged


def test_new_objects_get_new_ids() -> None:
    tracker = InstanceTracker()
    first = tracker.update(frame(blob(10, 10)), 0.0)
    second = tracker.update(frame(blob(12, 10), blob(400, 300)), DT)
    assert ids(first) == [1]
    assert by_prompt_and_x(second) == {("car", 12.0): 1, ("car", 400.0): 2}


def test_crossing_objects_keep_their_ids_by_their_motion() -> None:
    """Two cars pass each other; where they overlap, only their motion can tell them apart."""
    tracker = InstanceTracker(max_age_s=1.0, min_iou=0.3)
    rightward_ids, leftward_ids = set(), set()
    for step in range(12):
        right = blob(100 + 20 * step, 200, score=0.9)
        left = blob(320 - 20 * step, 200, score=0.8)
        tracked = tracker.update(frame(right, left), step * DT)
        rightward_ids.add(tracked.instances[0].track_id)
        leftward_ids.add(tracked.instances[1].track_id)
    assert rightward_ids == {1} and leftward_ids == {2}


def test_crossing_with_occlusion_the_hidden_object_keeps_its_id() -> None:
    """The front car hides the one behind for two frames; both ids survive."""
    tracker = InstanceTracker(max_age_s=1.0, min_iou=0.3)
    front_ids, back_ids = set(), set()
    for step in range(12):
        front = blob(100 + 20 * step, 200, score=0.9)
        back_x = 320 - 20 * step
        visible = abs(back_x - (100 + 20 * step)) >= 30
        objects = [front, blob(back_x, 200, score=0.8)] if visible else [front]
        tracked = tracker.update(frame(*objects), step * DT)
        front_ids.add(tracked.instances[0].track_id)
        if visible:
            back_ids.add(tracked.instances[1].track_id)
    assert front_ids == {1} and back_ids == {2}


def test_a_fast_camera_pan_does_not_break_tracks() -> None:
    """The view accelerates to 70 px a frame, far more than the 40-pixel objects' own width."""
    tracker = InstanceTracker(max_age_s=1.0, min_iou=0.2)
    x, y = 500.0, 100.0
    seen = []
    for step, shift in enumerate([0, 10, 25, 40, 55, 70, 70, 70]):
        x -= shift
        seen.append(ids(tracker.update(frame(blob(x, y), blob(x, y + 200, "person")), step * DT)))
    assert seen == [[1, 2]] * 8


def test_a_detection_continues_only_a_track_of_its_own_prompt() -> None:
    tracker = InstanceTracker()
    tracker.update(frame(blob(100, 100, "car")), 0.0)
    tracked = tracker.update(frame(blob(100, 100, "person")), DT)
    assert ids(tracked) == [2]


def test_an_object_gone_longer_than_max_age_comes_back_with_a_new_id() -> None:
    tracker = InstanceTracker(max_age_s=0.3, min_iou=0.3, max_age_frames=2)
    assert ids(tracker.update(frame(blob(100, 100)), 0.0)) == [1]
    tracker.update(frame(), 0.2)
    assert tracker.track_count == 1  # a short gap keeps the track
    tracker.update(frame(), 0.5)
    assert tracker.track_count == 0
    assert ids(tracker.update(frame(blob(100, 100)), 0.6)) == [2]


def test_removed_prompts_lose_their_tracks_and_kept_ones_keep_them() -> None:
    tracker = InstanceTracker()
    tracker.update(frame(blob(100, 100, "car"), blob(300, 100, "person")), 0.0)
    only_person = tracker.update(frame(blob(300, 100, "person"), prompts=("person",)), DT)
    assert ids(only_person) == [2]
    back = tracker.update(frame(blob(100, 100, "car"), blob(300, 100, "person")), 2 * DT)
    assert by_prompt_and_x(back) == {("car", 100.0): 3, ("person", 300.0): 2}


def test_reset_forgets_tracks_but_never_reuses_ids() -> None:
    tracker = InstanceTracker()
    tracker.update(frame(blob(100, 100), blob(300, 100)), 0.0)
    tracker.reset()
    assert tracker.track_count == 0
    assert ids(tracker.update(frame(blob(100, 100)), DT)) == [3]


def test_time_going_back_restarts_the_tracks_with_new_ids() -> None:
    tracker = InstanceTracker()
    tracker.update(frame(blob(100, 100)), 5.0)
    assert ids(tracker.update(frame(blob(100, 100)), 1.0)) == [2]  # a bag that loops


def test_empty_frames_return_empty_and_tracks_survive_them() -> None:
    tracker = InstanceTracker(max_age_s=1.0)
    assert tracker.update(frame(), 0.0).instances == []
    tracker.update(frame(blob(100, 100)), 0.1)
    assert tracker.update(frame(), 0.2).instances == []
    assert ids(tracker.update(frame(blob(104, 100)), 0.3)) == [1]


def test_a_frame_of_255_instances_keeps_255_ids() -> None:
    size = (1080, 1920)
    tracker = InstanceTracker()

    def grid(offset: int) -> SegmentationResult:
        objects = [
            blob(10 + 70 * (k % 25) + offset, 10 + 100 * (k // 25), score=1 - k / 1000, side=30, size=size)
            for k in range(255)
        ]
        return frame(*objects, size=size)

    first = tracker.update(grid(0), 0.0)
    second = tracker.update(grid(5), DT)
    assert ids(first) == ids(second) == list(range(1, 256))


def test_masks_without_pixels_are_matched_on_their_boxes() -> None:
    tracker = InstanceTracker()
    empty = Instance("car", 0, 0.9, (100.0, 100.0, 140.0, 140.0), np.zeros((0, 0), bool), (0, 0), SIZE)
    tracker.update(frame(empty), 0.0)
    moved = Instance("car", 0, 0.9, (104.0, 100.0, 144.0, 140.0), np.zeros((0, 0), bool), (0, 0), SIZE)
    assert ids(tracker.update(frame(moved), DT)) == [1]


def test_masks_decide_where_boxes_cannot() -> None:
    """Two L-shaped objects share one box region; each mask still finds its own track."""
    tracker = InstanceTracker(min_iou=0.5)
    upper = np.zeros((60, 60), bool)
    upper[:20, :] = True
    lower = np.zeros((60, 60), bool)
    lower[40:, :] = True
    box = (100.0, 100.0, 160.0, 160.0)
    first = [Instance("car", 0, s, box, m, (100, 100), SIZE) for s, m in ((0.9, upper), (0.8, lower))]
    tracker.update(frame(*first), 0.0)
    swapped = [Instance("car", 0, s, box, m, (100, 100), SIZE) for s, m in ((0.9, lower), (0.8, upper))]
    assert ids(tracker.update(frame(*swapped), DT)) == [2, 1]


@pytest.mark.parametrize(
    ("max_age_s", "min_iou"),
    [
        (0.0, 0.3),
        (-1.0, 0.3),
        (float("nan"), 0.3),
        (float("inf"), 0.3),
        (1.0, 0.0),
        (1.0, 1.5),
        (1.0, float("nan")),
    ],
)
def test_bad_settings_are_refused_with_the_reason(max_age_s: float, min_iou: float) -> None:
    with pytest.raises(InputError, match="track_"):
        InstanceTracker(max_age_s=max_age_s, min_iou=min_iou)


def test_a_stamp_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(InputError, match="stamp"):
        InstanceTracker().update(frame(), float("nan"))


@settings(max_examples=200)
@given(
    st.integers(0, 30),
    st.integers(0, 30),
    st.integers(1, 12),
    st.integers(1, 12),
    st.integers(-15, 15),
    st.integers(-15, 15),
    st.integers(1, 12),
    st.integers(1, 12),
    st.integers(0, 2**32 - 1),
)
def test_crop_iou_equals_the_full_size_iou(ra, ca, ha, wa, dr, dc, hb, wb, seed) -> None:
    rng = np.random.default_rng(seed)
    crop_a = rng.random((ha, wa)) < 0.6
    crop_b = rng.random((hb, wb)) < 0.6
    origin_a, origin_b = (ra + 20, ca + 20), (ra + 20 + dr, ca + 20 + dc)
    full_a = Instance("x", 0, 1.0, (0, 0, 1, 1), crop_a, origin_a, (80, 80)).mask
    full_b = Instance("x", 0, 1.0, (0, 0, 1, 1), crop_b, origin_b, (80, 80)).mask
    union = np.count_nonzero(full_a | full_b)
    expected = np.count_nonzero(full_a & full_b) / union if union else 0.0
    got = crop_iou(crop_a, origin_a, int(crop_a.sum()), crop_b, origin_b, int(crop_b.sum()))
    assert got == pytest.approx(expected)


_object = st.tuples(
    st.sampled_from(["car", "person", "dog"]),
    st.integers(-20, 630),
    st.integers(-20, 470),
    st.integers(1, 80),
    st.floats(0.0, 1.0),
)


@settings(max_examples=100)
@given(
    st.lists(st.tuples(st.floats(0.0, 0.6), st.lists(_object, max_size=12)), min_size=1, max_size=25),
    st.floats(0.05, 1.0),
    st.floats(0.05, 1.0),
)
def test_ids_are_unique_in_a_frame_and_never_come_back_after_death(frames, max_age_s, min_iou) -> None:
    max_age_frames = 2
    tracker = InstanceTracker(max_age_s=max_age_s, min_iou=min_iou, max_age_frames=max_age_frames)
    last_seen: dict[int, float] = {}
    missed: dict[int, int] = {}  # frames since each id was last given
    dead: set[int] = set()
    stamp = 0.0
    for gap, objects in frames:
        stamp += gap
        result = frame(
            *(blob(x, y, p, s, side) for p, x, y, side, s in objects), prompts=("car", "person", "dog")
        )
        tracked = tracker.update(result, stamp)
        frame_ids = ids(tracked)
        assert len(set(frame_ids)) == len(frame_ids)
        assert [i.box for i in tracked.instances] == [i.box for i in result.instances]
        for track_id in frame_ids:
            assert track_id not in dead  # a dead id is never given again
            if track_id not in last_seen:
                assert track_id > max(last_seen, default=0)  # new ids count up
            last_seen[track_id], missed[track_id] = stamp, 0
        for track_id in set(last_seen) - set(frame_ids) - dead:
            missed[track_id] += 1
            if missed[track_id] >= max_age_frames and stamp - last_seen[track_id] > max_age_s:
                dead.add(track_id)  # unmatched for both ages: over


def test_the_json_summary_carries_the_track_id_next_to_the_mask_id() -> None:
    tracker = InstanceTracker()
    tracker.update(frame(blob(10, 10)), 0.0)
    summary = tracker.update(frame(blob(300, 300, score=0.95), blob(12, 10)), DT).to_dict()
    assert [(i["id"], i["track_id"]) for i in summary["instances"]] == [(1, 2), (2, 1)]
    assert "track_id" not in frame(blob(10, 10)).to_dict()["instances"][0]


def test_instances_with_different_track_ids_are_different() -> None:
    tracker = InstanceTracker()
    tracked = tracker.update(frame(blob(10, 10)), 0.0).instances[0]
    assert tracked != blob(10, 10) and tracked == dataclasses.replace(blob(10, 10), track_id=1)


def test_with_track_id_equals_dataclasses_replace() -> None:
    instance = blob(10, 20, "person", 0.7)
    assert instance.with_track_id(9) == dataclasses.replace(instance, track_id=9)
    assert instance.track_id is None  # the original is left as it was


def test_an_object_moving_more_than_its_width_per_frame_keeps_its_id_from_its_first_frame() -> None:
    """No overlap between frames at all: the second stage pairs it by distance, then motion takes over."""
    tracker = InstanceTracker()
    seen = [ids(tracker.update(frame(blob(20 + 50 * step, 200)), step * DT)) for step in range(8)]
    assert seen == [[1]] * 8


def test_a_nearby_object_of_another_prompt_or_size_is_not_taken_for_a_lost_one() -> None:
    tracker = InstanceTracker()
    tracker.update(frame(blob(100, 100, side=40)), 0.0)
    other_prompt = tracker.update(frame(blob(150, 100, "person", side=40)), DT)
    much_larger = tracker.update(frame(blob(150, 100, side=120)), 2 * DT)
    assert ids(other_prompt) == [2] and ids(much_larger) == [3]


def test_a_static_scene_fed_slowly_keeps_its_ids_at_the_defaults() -> None:
    """A slow engine (a processed frame every 1.5 s, above track_max_age_s) keeps every id."""
    tracker = InstanceTracker()
    seen = [ids(tracker.update(frame(blob(100, 100), blob(300, 200)), 1.5 * step)) for step in range(6)]
    assert seen == [[1, 2]] * 6


def test_a_slow_camera_keeps_a_track_through_a_missed_frame() -> None:
    """Expiry follows association and counts the camera's frames: one miss 3 s long is survived."""
    tracker = InstanceTracker()
    assert ids(tracker.update(frame(blob(100, 100)), 0.0)) == [1]
    tracker.update(frame(), 3.0)  # the detector missed it once
    assert ids(tracker.update(frame(blob(102, 100)), 6.0)) == [1]


def test_a_track_ends_only_after_enough_missed_frames_and_enough_time() -> None:
    tracker = InstanceTracker(max_age_s=1.0, max_age_frames=3)
    tracker.update(frame(blob(100, 100)), 0.0)
    tracker.update(frame(), 5.0)
    tracker.update(frame(), 10.0)
    assert tracker.track_count == 1  # 10 s, but only 2 missed frames
    tracker.update(frame(), 15.0)
    assert tracker.track_count == 0  # 3 missed frames and more than 1 s
    fast = InstanceTracker(max_age_s=1.0, max_age_frames=3)
    fast.update(frame(blob(100, 100)), 0.0)
    for step in range(1, 10):
        fast.update(frame(), step * 0.1)
    assert fast.track_count == 1  # 9 missed frames, but only 0.9 s
    assert ids(fast.update(frame(blob(100, 100)), 1.0)) == [1]


def test_trackers_sharing_an_id_space_never_give_the_same_id() -> None:
    """Two cameras of one node: an id names one object, whichever camera saw it."""
    space = TrackIdSpace()
    left, front = InstanceTracker(id_space=space), InstanceTracker(id_space=space)
    left_ids, front_ids = set(), []
    for step in range(3):
        left_ids |= set(ids(left.update(frame(blob(100, 100), blob(300, 100 + 100 * step)), step * 5.0)))
        front_ids += ids(front.update(frame(blob(100, 100)), step * 5.0))
        front.reset()  # the same object, a new track each time: new ids
    assert left_ids.isdisjoint(front_ids) and len(set(front_ids)) == 3
    assert space.take(2).tolist() == [space.last_given - 1, space.last_given]
    assert space.last_given == max(left_ids | set(front_ids)) + 2


def test_an_id_space_gives_each_id_once_across_threads() -> None:
    space = TrackIdSpace()
    with ThreadPoolExecutor(max_workers=4) as pool:
        chunks = list(pool.map(lambda _: space.take(3).tolist(), range(200)))
    flat = [i for chunk in chunks for i in chunk]
    assert sorted(flat) == list(range(1, 601))


@pytest.mark.parametrize("back_s", [0.001, 0.2, 0.9])
def test_a_frame_stamped_slightly_earlier_keeps_the_tracks(back_s: float) -> None:
    """Jitter (two publishers, a clock correction): a small step back is not a new stream."""
    tracker = InstanceTracker()
    tracker.update(frame(blob(100, 100)), 10.0)
    assert ids(tracker.update(frame(blob(101, 100)), 10.0 - back_s)) == [1]
    assert ids(tracker.update(frame(blob(102, 100)), 10.1)) == [1]


def test_only_a_real_jump_back_restarts_the_tracks() -> None:
    tracker = InstanceTracker()
    tracker.update(frame(blob(100, 100)), 10.0)
    assert ids(tracker.update(frame(blob(100, 100)), 10.0 - STAMP_JUMP_BACK_S - 0.01)) == [2]


def test_the_processed_interval_is_reported_with_a_warning_when_ageing_counts_frames() -> None:
    fast, slow = InstanceTracker(), InstanceTracker()
    assert fast.processed_interval_s is None and fast.ageing_warning() == ""
    for step in range(5):
        fast.update(frame(blob(100, 100)), step * 0.1)
        slow.update(frame(blob(100, 100)), step * 4.0)
    assert fast.processed_interval_s == pytest.approx(0.1)
    assert fast.ageing_warning() == ""
    assert slow.processed_interval_s == pytest.approx(4.0)
    warning = slow.ageing_warning()
    assert "4.0 s apart" in warning and "track_max_age_s 1" in warning and "3 missed frames" in warning
