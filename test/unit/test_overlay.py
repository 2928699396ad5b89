"""The overlay picture: each instance's own pixels tinted with its colour, nothing else touched."""

from __future__ import annotations

import numpy as np

from tt_sam3_ros.overlay import draw_overlay, instance_colour
from tt_sam3_ros.results import Instance, SegmentationResult


def instance(score: float, rows: slice, cols: slice) -> Instance:
    crop = np.zeros((rows.stop - rows.start, cols.stop - cols.start), dtype=bool)
    crop[1:-1, 1:-1] = True
    return Instance(
        "car",
        0,
        score,
        (cols.start, rows.start, cols.stop, rows.stop),
        crop,
        (rows.start, cols.start),
        (120, 160),
    )


def test_mask_pixels_are_blended_with_their_instance_colour() -> None:
    image = np.random.default_rng(0).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    result = SegmentationResult(
        (120, 160),
        ["car"],
        [instance(0.9, slice(20, 60), slice(30, 90)), instance(0.5, slice(75, 115), slice(20, 100))],
        {},
    )
    overlay = draw_overlay(image, result)
    labels = result.instance_mask()
    assert overlay.shape == image.shape and overlay.dtype == np.uint8
    for instance_id in (1, 2):
        colour = np.array(instance_colour(instance_id), dtype=np.float32)
        # Away from the drawn box outlines and labels (2 px in from each crop edge).
        inner = np.zeros_like(labels, dtype=bool)
        inner[24:56, 34:86] = instance_id == 1
        inner[79:111, 24:96] = instance_id == 2
        pixels = inner & (labels == instance_id)
        want = image[pixels] * 0.5 + 0.5 * colour
        np.testing.assert_allclose(overlay[pixels], want, atol=0.5 + 1e-6)  # rounded to the nearest
    untouched = np.ones(labels.shape, dtype=bool)
    untouched[5:62, 25:95] = False  # first box, its outline and its label tab
    untouched[60:117, 15:105] = False  # second box, outline and label tab
    np.testing.assert_array_equal(overlay[untouched], image[untouched])
    assert not np.shares_memory(overlay, image)


def test_nothing_found_gives_the_image_back() -> None:
    image = np.full((120, 160, 3), 77, np.uint8)
    np.testing.assert_array_equal(draw_overlay(image, SegmentationResult((120, 160), ["car"], [], {})), image)
