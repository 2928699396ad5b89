"""The instance label image and result summaries, as a consumer reads them."""

from __future__ import annotations

import json

import numpy as np

from tt_sam3_ros.core.results import Instance, SegmentationResult


def square(score: float, rows: slice, cols: slice, size=(10, 12), prompt="car") -> Instance:
    crop = np.ones((rows.stop - rows.start, cols.stop - cols.start), dtype=bool)
    return Instance(
        prompt, 0, score, (cols.start, rows.start, cols.stop, rows.stop), crop, (rows.start, cols.start), size
    )


def test_higher_score_keeps_overlapping_pixels() -> None:
    best = square(0.9, slice(2, 6), slice(2, 6))
    second = square(0.6, slice(4, 8), slice(4, 10))
    labels = SegmentationResult((10, 12), ["car"], [best, second], {"car": 0.9}).instance_mask()
    assert labels.dtype == np.uint8 and labels.shape == (10, 12)
    assert labels[3, 3] == 1 and labels[5, 5] == 1  # shared pixel goes to the better instance
    assert labels[7, 9] == 2 and labels[0, 0] == 0
    assert np.count_nonzero(labels == 2) == 4 * 6 - 2 * 2


def test_mask_property_places_the_crop_in_a_full_image() -> None:
    instance = square(0.5, slice(3, 5), slice(7, 9))
    mask = instance.mask
    assert mask.shape == (10, 12) and mask.sum() == 4 and mask[3:5, 7:9].all()
    assert instance.area == 4


def test_more_than_255_instances_are_capped_not_wrapped() -> None:
    instances = [
        square(1.0 - k / 1000, slice(k // 20, k // 20 + 1), slice(k % 20, k % 20 + 1), (20, 20))
        for k in range(300)
    ]
    labels = SegmentationResult((20, 20), ["car"], instances, {}).instance_mask()
    assert labels.max() == 255
    assert labels[255 // 20, 255 % 20] == 0  # instance 256 is left out, never written as 0 or 1
    assert labels[0, 0] == 1


def test_to_dict_is_json_and_ids_match_the_label_image() -> None:
    result = SegmentationResult(
        (10, 12),
        ["car", "person"],
        [square(0.9, slice(0, 2), slice(0, 2)), square(0.7, slice(5, 6), slice(5, 9), prompt="person")],
        {"car": 0.95, "person": 0.8},
        {"total": 12.5},
    )
    summary = json.loads(json.dumps(result.to_dict()))
    assert [i["id"] for i in summary["instances"]] == [1, 2]
    assert summary["instances"][1]["prompt"] == "person" and summary["instances"][1]["mask_area"] == 4
    labels = result.instance_mask()
    assert np.count_nonzero(labels == 2) == summary["instances"][1]["mask_area"]


def test_instances_compare_by_value_and_hash_consistently() -> None:
    # A frozen dataclass holding an array would make `==` raise (ambiguous truth value).
    first = square(0.5, slice(3, 5), slice(7, 9))
    same = square(0.5, slice(3, 5), slice(7, 9))
    assert first == same and hash(first) == hash(same)
    assert first != square(0.5, slice(3, 5), slice(7, 10))  # one more mask column
    other_pixels = square(0.5, slice(3, 5), slice(7, 9))
    other_pixels.mask_crop[0, 0] = False
    assert first != other_pixels  # same fields, different mask pixels
    assert first != square(0.6, slice(3, 5), slice(7, 9))
    assert first != "car"
    assert len({first, same}) == 1
    assert [first] == [same]  # lists (and results) of instances compare too
