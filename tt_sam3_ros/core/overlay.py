"""A picture of a result for people: coloured masks, boxes, labels and scores.

Used by the CLI (written to PNG or, tracked, to MP4) and by the node's /sam3/overlay topic.
Colours are fixed per id, so the same id has the same colour in every frame; the id drawn is
the instance's track id when it has one, else its position in the frame (its mask value).
"""

from __future__ import annotations

import cv2
import numpy as np

from tt_sam3_ros.core.results import SegmentationResult

_MASK_ALPHA = 0.5


def instance_colour(instance_id: int) -> tuple[int, int, int]:
    """A bright RGB colour per id, spread around the hue circle by the golden angle."""
    hue = int((instance_id * 137.508) % 180)
    hsv = np.uint8([[[hue, 200, 255]]])
    r, g, b = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)[0, 0]
    return int(r), int(g), int(b)


def draw_overlay(
    image: np.ndarray, result: SegmentationResult, labels: np.ndarray | None = None
) -> np.ndarray:
    """uint8 RGB (H, W, 3) copy of ``image`` with every instance drawn on it.

    ``labels``: ``result.instance_mask()`` when the caller already made it (the node does).
    """
    canvas = image.copy()
    if labels is None:
        labels = result.instance_mask()
    count = min(len(result.instances), 255)
    # Blend each instance inside its own crop only: the cost follows the objects' area.
    for instance_id, instance in enumerate(result.instances[:count], start=1):
        if not instance.mask_crop.any():
            continue  # an empty mask (score passed, no positive logit): only its box and label are drawn
        row, col = instance.crop_origin
        height, width = instance.mask_crop.shape
        window = canvas[row : row + height, col : col + width]
        mine = labels[row : row + height, col : col + width] == instance_id
        # OpenCV blends the whole window in one pass; copyto keeps it only on this instance's pixels.
        colour = np.full_like(window, instance_colour(_shown_id(instance_id, instance.track_id)))
        tinted = cv2.addWeighted(window, 1 - _MASK_ALPHA, colour, _MASK_ALPHA, 0)
        np.copyto(window, tinted, where=mine[:, :, None])
    thickness = max(1, round(max(image.shape[:2]) / 500))
    for instance_id, instance in enumerate(result.instances[:count], start=1):
        shown = _shown_id(instance_id, instance.track_id)
        colour = instance_colour(shown)
        x1, y1, x2, y2 = (round(v) for v in instance.box)
        cv2.rectangle(canvas, (x1, y1), (max(x1, x2 - 1), max(y1, y2 - 1)), colour, thickness)
        name = instance.prompt or "(boxes)"  # the box-only concept has no text
        _label(canvas, f"{shown} {name} {instance.score:.2f}", (x1, y1), colour, thickness)
    return canvas


def _shown_id(position: int, track_id: int | None) -> int:
    """The id a person sees: the track id when tracked, else the position (mask value)."""
    return position if track_id is None else track_id


def _label(
    canvas: np.ndarray, text: str, corner: tuple[int, int], colour: tuple[int, int, int], thickness: int
) -> None:
    """Text on a filled tab above the box's top-left corner (inside the image)."""
    scale = 0.4 * thickness
    (width, height), baseline = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    x = min(max(corner[0], 0), max(canvas.shape[1] - width, 0))
    y = max(corner[1], height + baseline)
    cv2.rectangle(canvas, (x, y - height - baseline), (x + width, y), colour, cv2.FILLED)
    cv2.putText(canvas, text, (x, y - baseline), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), 1, cv2.LINE_AA)
