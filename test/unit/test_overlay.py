"""The overlay picture: each instance's own pixels tinted with its colour, nothing else touched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import torch
from frames import random_frame
from PIL import Image

from tt_sam3_ros.core.overlay import draw_overlay, instance_colour
from tt_sam3_ros.core.results import Instance, SegmentationResult


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
    image = random_frame(0, (120, 160))
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
    for shown, found in enumerate(result.instances, start=1):
        x1, y1, x2, y2 = (int(v) for v in found.box)
        untouched[y1 - 1 : y2 + 1, x1 - 1 : x2 + 1] = False  # the box and its 1 px outline
        # The label tab above the box's corner: as wide as OpenCV's font draws the text (its
        # metrics differ between OpenCV releases: 70 px for these labels in 4.6).
        (width, height), baseline = cv2.getTextSize(
            f"{shown} car {found.score:.2f}", cv2.FONT_HERSHEY_SIMPLEX, 0.4, 1
        )
        untouched[y1 - height - baseline - 1 : y1 + 1, x1 - 1 : x1 + width + 2] = False
    assert untouched.sum() > 0.5 * untouched.size  # most of the frame is away from both
    np.testing.assert_array_equal(overlay[untouched], image[untouched])
    assert not np.shares_memory(overlay, image)


def test_nothing_found_gives_the_image_back() -> None:
    image = np.full((120, 160, 3), 77, np.uint8)
    np.testing.assert_array_equal(draw_overlay(image, SegmentationResult((120, 160), ["car"], [], {})), image)


def test_an_instance_with_an_empty_mask_still_gets_its_box_and_label() -> None:
    # At low thresholds a query can pass on score while none of its mask logits is positive.
    image = np.full((120, 160, 3), 77, np.uint8)
    empty = Instance("car", 0, 0.3, (30.0, 20.0, 90.0, 60.0), np.zeros((0, 0), bool), (0, 0), (120, 160))
    full = instance(0.9, slice(75, 115), slice(20, 100))
    result = SegmentationResult((120, 160), ["car"], [full, empty], {})
    overlay = draw_overlay(image, result)
    assert overlay.shape == image.shape and overlay.dtype == np.uint8
    assert np.all(overlay[40, 30] == instance_colour(2))  # the empty instance's box outline
    np.testing.assert_array_equal(overlay[30:50, 40:80], image[30:50, 40:80])  # no tint inside it


def test_cli_at_threshold_zero_writes_png_and_json_for_instances_with_empty_masks(tmp_path: Path) -> None:
    """At threshold 0 every query passes on score, also those with no positive mask logit: the
    CLI still writes both files. The tiny model with its instance projection zeroed gives every
    query an all-zero mask (the image-sensitive tiny model's masks are never empty on their own)."""
    from safetensors.torch import load_file, save_file

    from tt_sam3_ros.weights.tiny_model import save_tiny_sam3

    weights = save_tiny_sam3(tmp_path / "blank_masks")
    state = load_file(weights / "model.safetensors")
    for name in ("mask_decoder.instance_projection.weight", "mask_decoder.instance_projection.bias"):
        state[name] = torch.zeros_like(state[name])
    save_file(state, weights / "model.safetensors", metadata={"format": "pt"})
    picture = tmp_path / "img.png"
    Image.fromarray(np.zeros((240, 320, 3), np.uint8)).save(picture)
    done = subprocess.run(
        [sys.executable, "-m", "tt_sam3_ros.cli.main", "segment", str(picture), "--prompt", "car",
         "--weights-dir", str(weights), "--threshold", "0", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "img.json").read_text())
    assert report["instances"] and all(i["mask_area"] == 0 for i in report["instances"])
    assert np.asarray(Image.open(tmp_path / "img_overlay.png")).shape == (240, 320, 3)
