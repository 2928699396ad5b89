"""A picture of a result for people: coloured masks, boxes, labels and scores.

Used by the CLI (written to PNG) and by the node's /sam3/overlay topic. Colours
are fixed per instance id, so the same id has the same colour in every frame.
"""

from __future__ import annotations

import cv2
import numpy as np

from .results import SegmentationResult

_MASK_ALPHA = 0.5


def instance_colour(instance_id: int) -> tuple[int, int, int]:
    """A bright RGB colour per id, spread around the hue circle by the golden angle."""
    hue = int((instance_id * 137.508) % 180)
    hsv = np.uint8([[[hue, 200, 255]]])
    r, g, b = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)[0, 0]
    return int(r), int(g), int(b)


def draw_overlay(image: np.ndarray, result: SegmentationResult) -> np.ndarray:
    """uint8 RGB (H, W, 3) copy of ``image`` with every instance drawn on it."""
    canvas = image.copy()
    labels = result.instance_mask()
    count = min(len(result.instances), 255)
    if count:
        palette = np.array([(0, 0, 0)] + [instance_colour(k) for k in range(1, count + 1)], dtype=np.float32)
        covered = labels > 0
        blended = canvas[covered] * (1 - _MASK_ALPHA) + palette[labels[covered]] * _MASK_ALPHA
        canvas[covered] = blended.astype(np.uint8)
    thickness = max(1, round(max(image.shape[:2]) / 500))
    for instance_id, instance in enumerate(result.instances[:count], start=1):
        colour = instance_colour(instance_id)
        x1, y1, x2, y2 = (round(v) for v in instance.box)
        cv2.rectangle(canvas, (x1, y1), (max(x1, x2 - 1), max(y1, y2 - 1)), colour, thickness)
        _label(canvas, f"{instance_id} {instance.prompt} {instance.score:.2f}", (x1, y1), colour, thickness)
    return canvas


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
