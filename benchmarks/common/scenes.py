"""Deterministic inputs shared by the sections: pictures and per-instance mask logits."""

from __future__ import annotations

import numpy as np

#: Prompts the model section uses; the 1-prompt rows take the first.
PROMPTS = ["car", "person", "traffic light", "a dog on the grass"]


def picture(height: int, width: int, seed: int = 0) -> np.ndarray:
    """uint8 RGB (height, width, 3) with gradients, noise and a few solid shapes."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:height, 0:width]
    image = np.stack([rows * 255 // height, cols * 255 // width, (rows + cols) % 256], axis=-1)
    image = (image + rng.integers(0, 32, image.shape)).clip(0, 255).astype(np.uint8)
    for _ in range(6):
        top, left = rng.integers(0, height // 2), rng.integers(0, width // 2)
        image[top : top + height // 4, left : left + width // 4] = rng.integers(0, 256, 3)
    return image


def instance_logits(count: int, side: int = 288, seed: int = 0) -> np.ndarray:
    """float32 (count, side, side) mask logits: one blob per instance, negative elsewhere.

    Blob radii span 4% to 14% of the image side (small to large objects of a street scene),
    with noise on top, so the positive window is the object's, as with trained weights.
    """
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:side, 0:side]
    logits = np.empty((count, side, side), dtype=np.float32)
    for k in range(count):
        radius = rng.uniform(0.04, 0.14) * side
        centre = rng.uniform(radius, side - radius, 2)
        distance = np.hypot(rows - centre[0], cols - centre[1])
        noise = rng.standard_normal((side, side)) * 0.3
        logits[k] = (radius - distance) / 4.0 + noise - 2.0 * (distance > radius + 4)
    return logits


def moving_objects_clip(frames: int, height: int = 240, width: int = 320, seed: int = 0) -> list[np.ndarray]:
    """uint8 RGB frames (height, width, 3) of solid discs that enter, cross and leave.

    Three discs on a textured, still background: one enters from the left, one from the right
    (they cross mid-clip), one is present from the first frame and leaves through the bottom
    two thirds of the way through. A tracker sees objects appear, overlap and disappear.
    """
    rng = np.random.default_rng(seed)
    background = picture(height, width, seed) // 2
    rows, cols = np.mgrid[0:height, 0:width]
    radius = min(height, width) / 8
    span = width + 2 * radius
    colours = rng.integers(128, 256, (3, 3)).astype(np.uint8)
    clip = []
    for index in range(frames):
        t = index / max(frames - 1, 1)
        centres = [
            (height * 0.45, -radius + span * t),
            (height * 0.55, width + radius - span * t),
            (height * 0.3 + height * 1.2 * max(0.0, t - 0.3) / 0.4, width * 0.5),
        ]
        image = background.copy()
        for colour, (row, col) in zip(colours, centres, strict=True):
            image[np.hypot(rows - row, cols - col) < radius] = colour
        clip.append(image)
    return clip
