"""Scores, boxes and masks: the windowed mask upsample equals the whole-image one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tt_sam3_ros.core import postprocess

SHAPES = [(2, 2), (3, 1000), (37, 53), (288, 288), (480, 640), (1080, 1920), (1001, 999), (4096, 300)]


def blob_logits(rng: np.random.Generator, centre: tuple[float, float], radius: float) -> np.ndarray:
    """288x288 logits positive inside a disc, noisy elsewhere but negative."""
    rows, cols = np.mgrid[0:288, 0:288]
    distance = np.hypot(rows - centre[0], cols - centre[1])
    noise = rng.standard_normal((288, 288)).astype(np.float32) * 0.3
    return (radius - distance).astype(np.float32) / 10 + noise


@pytest.mark.parametrize("size", SHAPES)
def test_window_equals_full_upsample_pixel_for_pixel(size) -> None:
    rng = np.random.default_rng(sum(size))
    for centre, radius in [((20, 30), 12), ((200, 150), 60), ((287, 0), 5), ((144, 144), 400)]:
        logits = blob_logits(rng, centre, radius)
        crop, (row, col) = postprocess.mask_crop(logits, size)
        full = postprocess.upsample_full(logits, size) > 0
        ours = np.zeros(size, dtype=bool)
        ours[row : row + crop.shape[0], col : col + crop.shape[1]] = crop
        np.testing.assert_array_equal(ours, full)


def test_window_is_smaller_than_the_image_for_a_small_object() -> None:
    logits = blob_logits(np.random.default_rng(1), (40, 40), 10)
    crop, _ = postprocess.mask_crop(logits, (1080, 1920))
    assert crop.any()
    assert crop.size < 0.05 * 1080 * 1920


def test_all_negative_logits_give_an_empty_mask() -> None:
    crop, origin = postprocess.mask_crop(np.full((288, 288), -1.0, np.float32), (100, 200))
    assert crop.shape == (0, 0) and origin == (0, 0)


@pytest.mark.parametrize("size", [(37, 53), (480, 640), (1080, 1920), (4096, 300)])
def test_full_upsample_matches_torch_interpolate(size) -> None:
    logits = np.random.default_rng(7).standard_normal((288, 288)).astype(np.float32)
    ours = postprocess.upsample_full(logits, size)
    theirs = torch.nn.functional.interpolate(
        torch.from_numpy(logits)[None, None], size=size, mode="bilinear", align_corners=False
    )[0, 0].numpy()
    # Same sample positions and weights as torch; only float rounding order may differ.
    np.testing.assert_allclose(ours, theirs, atol=1e-6, rtol=0)
    assert np.mean((ours > 0) == (theirs > 0)) > 0.99999


def test_select_instances_thresholds_and_orders_by_score() -> None:
    logits = np.array([[3.0, -3.0, 0.5], [2.0, 4.0, -10.0]], dtype=np.float32)
    presence = np.array([5.0, 0.0], dtype=np.float32)
    selection = postprocess.select_instances(logits, presence, threshold=0.45, max_instances=10)
    scores = postprocess.sigmoid(logits) * postprocess.sigmoid(presence)[:, None]
    assert list(zip(selection.prompt_index, selection.query_index, strict=True)) == [(0, 0), (0, 2), (1, 1)]
    np.testing.assert_allclose(selection.scores, [scores[0, 0], scores[0, 2], scores[1, 1]])
    assert np.all(selection.scores > 0.45)
    capped = postprocess.select_instances(logits, presence, threshold=0.0, max_instances=2)
    assert len(capped.scores) == 2 and capped.scores[0] >= capped.scores[1]


def test_sigmoid_is_stable_at_extremes() -> None:
    values = postprocess.sigmoid(np.array([-1000.0, 0.0, 1000.0]))
    np.testing.assert_allclose(values, [0.0, 0.5, 1.0])
    assert np.all(np.isfinite(values))


def test_boxes_scale_to_source_pixels_and_clamp() -> None:
    boxes = np.array([[0.1, 0.2, 0.5, 0.6], [-0.1, -0.2, 1.3, 1.1]])
    pixels = postprocess.boxes_to_source(boxes, (200, 400))
    np.testing.assert_allclose(pixels[0], [40, 40, 200, 120])
    np.testing.assert_allclose(pixels[1], [0, 0, 400, 200])


def test_sigmoid_keeps_relative_precision_on_the_negative_side() -> None:
    # A naive 1 - 1/(1 + e^|x|) cancels to 0.0 in float32 at x <= -17; the scores of weak
    # queries (and the presence of absent concepts) must stay distinguishable, not flatten to 0.
    values = np.concatenate([np.linspace(-87.0, 30.0, 2341), [-17.0, -30.0, -80.0]]).astype(np.float32)
    # float64 is exact to float32 precision here (down to -87, where float32 stops being normal).
    reference = 1.0 / (1.0 + np.exp(-values.astype(np.float64)))
    ours = postprocess.sigmoid(values)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, reference, rtol=1e-6, atol=0)
    assert np.all(np.diff(ours[:2341]) >= 0)  # monotonic
