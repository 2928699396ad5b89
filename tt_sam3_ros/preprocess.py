"""Source images of any size -> the model's 1008x1008 input. One copy for every engine.

SAM 3 squashes the whole image to 1008x1008 (aspect ratio not kept) with bilinear,
antialiased resampling, then maps [0, 255] to [-1, 1]. We resample with the same
torchvision call transformers' Sam3Processor makes, so our pixels equal the
reference pipeline's; boxes and masks are mapped back to source pixels afterwards.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from .engines.base import MODEL_SIDE
from .errors import InputError

#: Default largest accepted image side; bigger frames are rejected, not resized silently.
DEFAULT_MAX_IMAGE_SIDE = 4096
#: Smallest accepted side: bilinear resampling needs at least 2 pixels per axis.
MIN_IMAGE_SIDE = 2


def load_image(image: object, max_side: int = DEFAULT_MAX_IMAGE_SIDE) -> np.ndarray:
    """Any supported image -> uint8 RGB (H, W, 3), validated.

    Accepts a uint8 numpy array (H, W) grey, (H, W, 1|3|4), a file path, encoded
    PNG/JPEG bytes, or a PIL image. Grey is replicated to three channels, alpha is
    dropped. Raises ValueError naming the problem and the limit.
    """
    if isinstance(image, (str, Path)):
        image = _decode(Path(image).read_bytes(), f"file {image}")
    elif isinstance(image, (bytes, bytearray, memoryview)):
        image = _decode(bytes(image), "the given bytes")
    elif not isinstance(image, np.ndarray):
        image = _from_pil(image)
    return _check_array(image, max_side)


def _decode(data: bytes, what: str) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as picture:
            return _from_pil(picture)
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise InputError(f"cannot decode {what} as an image (PNG/JPEG expected): {error}") from None


def _from_pil(picture: object) -> np.ndarray:
    from PIL import Image

    if not isinstance(picture, Image.Image):
        raise InputError(
            f"unsupported image type {type(picture).__name__}: "
            "give a uint8 numpy array, a path, PNG/JPEG bytes or a PIL image"
        )
    return np.asarray(picture.convert("RGB"))


def _check_array(image: np.ndarray, max_side: int) -> np.ndarray:
    if image.dtype != np.uint8:
        raise InputError(f"image dtype must be uint8, got {image.dtype}")
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3 or image.shape[2] not in (1, 3, 4):
        raise InputError(f"image must be HxW, HxWx1, HxWx3 or HxWx4; got shape {image.shape}")
    height, width = image.shape[:2]
    if min(height, width) < MIN_IMAGE_SIDE:
        raise InputError(f"image is {width}x{height}; each side must be at least {MIN_IMAGE_SIDE} pixels")
    if max(height, width) > max_side:
        raise InputError(f"image is {width}x{height}; the largest side allowed is {max_side} pixels")
    if image.shape[2] == 1:
        return np.repeat(image, 3, axis=2)
    if image.shape[2] == 4:
        return image[:, :, :3]
    return image


def to_model_input(rgb: np.ndarray) -> np.ndarray:
    """uint8 RGB (H, W, 3) -> float32 (1, 3, 1008, 1008) in [-1, 1].

    Resampled like Sam3Processor: bilinear with antialiasing on the uint8 image
    (torchvision rounds back to uint8), then x / 255 * 2 - 1 (mean 0.5, std 0.5).

    The normalisation runs in numpy, on one thread and in place: the same float32 operations
    as the processor's (so the same bits), without torch's thread pool, whose workers stall
    when the cores are busy with other work, as a robot's are (`make bench`, host section).
    """
    import torch
    from torchvision.transforms.v2 import functional as tvf

    rgb = np.ascontiguousarray(rgb)
    if not rgb.flags.writeable:  # a view over a ROS message buffer; torch wants to own writable memory
        rgb = rgb.copy()
    chw = torch.from_numpy(rgb).permute(2, 0, 1)
    resized = tvf.resize(
        chw, [MODEL_SIDE, MODEL_SIDE], interpolation=tvf.InterpolationMode.BILINEAR, antialias=True
    )
    pixels = np.empty((1, 3, MODEL_SIDE, MODEL_SIDE), dtype=np.float32)
    np.multiply(resized.numpy(), np.float32(1.0 / 255.0), out=pixels[0], dtype=np.float32)
    pixels -= np.float32(0.5)
    pixels /= np.float32(0.5)
    return pixels
