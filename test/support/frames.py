"""The test suite's pictures: one random-frame maker and one structured scene, seeded and small."""

from __future__ import annotations

import numpy as np

#: Height and width of the frames the suite feeds the engines unless a test needs another size.
FRAME_SIZE = (240, 320)


def random_frame(seed: int, size: tuple[int, int] = FRAME_SIZE) -> np.ndarray:
    """Uniform noise, uint8 (H, W, 3) RGB: the same seed gives the same frame."""
    return np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)


def structured_picture(size: tuple[int, int] = FRAME_SIZE) -> np.ndarray:
    """uint8 (H, W, 3) RGB with structure: gradients in each channel and a bright red rectangle."""
    rows, cols = np.mgrid[0 : size[0], 0 : size[1]]
    image = np.stack([rows % 256, cols % 256, (rows + cols) % 256], axis=-1).astype(np.uint8)
    image[size[0] // 4 : size[0] * 7 // 12, size[1] * 5 // 16 : size[1] * 11 // 16] = (250, 30, 30)
    return image


def distinct_frames() -> dict[str, np.ndarray]:
    """Frames that share nothing a model should answer alike: a scene, the same scene with its
    channels reversed (only colour differs), flat grey and four noise frames."""
    scene = structured_picture()
    return {
        "scene": scene,
        "scene_bgr": np.ascontiguousarray(scene[..., ::-1]),
        "grey": np.full((*FRAME_SIZE, 3), 128, dtype=np.uint8),
        **{f"noise_{seed}": random_frame(seed) for seed in range(4)},
    }
