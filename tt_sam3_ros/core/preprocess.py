"""Source images of any size -> the model's 1008x1008 input. One copy for every engine.

SAM 3 squashes the whole image to 1008x1008 (aspect ratio not kept) with bilinear,
antialiased resampling, then maps [0, 255] to [-1, 1]. We resample with the same
torchvision call transformers' Sam3Processor makes, so our pixels equal the
reference pipeline's; boxes and masks are mapped back to source pixels afterwards.
Engines take the resized uint8 image (``resize_to_model``); the torch engine normalises it
(``normalise``), the ttnn engine uploads it as it is and folds the normalisation into the
chip's patch embedding.
"""

from __future__ import annotations

import io
import re
import struct
from pathlib import Path

import numpy as np

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.engines.base import MODEL_SIDE

#: Default largest accepted image side; bigger frames are rejected, not resized silently.
DEFAULT_MAX_IMAGE_SIDE = 4096
#: Smallest accepted side: bilinear resampling needs at least 2 pixels per axis.
MIN_IMAGE_SIDE = 2


def load_image(image: object, max_side: int = DEFAULT_MAX_IMAGE_SIDE) -> np.ndarray:
    """Any supported image -> uint8 RGB (H, W, 3), validated.

    Accepts a uint8 numpy array (H, W) grey, (H, W, 1|3|4), a file path, encoded
    PNG/JPEG bytes, or a PIL image. Grey is replicated to three channels, alpha is
    dropped. Encoded and PIL images have their size checked from the header before any
    pixel is decoded, so a small file that declares a huge picture costs nothing.
    Raises InputError (a ValueError) naming the problem and the limit.
    """
    if isinstance(image, (str, Path)):
        image = _decode(Path(image).read_bytes(), f"file {image}", max_side)
    elif isinstance(image, (bytes, bytearray, memoryview)):
        image = _decode(bytes(image), "the given bytes", max_side)
    elif not isinstance(image, np.ndarray):
        image = _from_pil(image, "the PIL image", max_side)
    return _check_array(image, max_side)


def _decode(data: bytes, what: str, max_side: int) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        declared = declared_size(data)
    except InputError as error:
        raise InputError(f"cannot decode {what} as an image: {error}") from None
    if declared is not None:
        check_declared_size(declared, what, max_side)
    try:
        picture = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as error:  # other formats: PIL's own limit, far above ours
        raise InputError(f"{what} declares a picture too large to decode: {error}") from None
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise InputError(f"cannot decode {what} as an image (PNG/JPEG expected): {error}") from None
    with picture:
        return _from_pil(picture, what, max_side)


def _from_pil(picture: object, what: str, max_side: int) -> np.ndarray:
    from PIL import Image

    if not isinstance(picture, Image.Image):
        raise InputError(
            f"unsupported image type {type(picture).__name__}: "
            "give a uint8 numpy array, a path, PNG/JPEG bytes or a PIL image"
        )
    # PIL opens lazily: the size comes from the header, and convert() is what decodes.
    check_declared_size(picture.size, what, max_side)
    try:
        return np.asarray(picture.convert("RGB"))
    except (OSError, ValueError) as error:  # truncated or corrupt pixel data
        raise InputError(f"cannot decode {what} as an image (PNG/JPEG expected): {error}") from None


def declared_size(data: bytes | memoryview) -> tuple[int, int] | None:
    """(width, height) that a PNG or JPEG header declares, read without decoding a pixel.

    None for data that is neither PNG nor JPEG. Raises InputError for a PNG or JPEG whose
    header is cut short or does not say its size (no decoder could use it either).
    """
    head = bytes(data[:8])
    if head.startswith(PNG_MAGIC):
        return _png_size(data)
    if head.startswith(JPEG_MAGIC):
        return _jpeg_size(data)
    return None


def jpeg_is_complete(data: bytes | memoryview) -> bool:
    """Whether JPEG data ends with its end-of-image marker (FF D9), trailing zero padding aside.

    A JPEG cut short (a dropped packet, a truncated file) must be refused before OpenCV sees it:
    OpenCV 4.6 (Ubuntu 24.04's) and 4.5 (Ubuntu 22.04's) decode it with only a libjpeg warning,
    the missing rows grey, where 4.11 refuses it. Only the end is read: an embedded thumbnail's
    own marker cannot pass for the picture's.
    """
    return bytes(data[-_JPEG_TAIL_BYTES:]).rstrip(b"\x00").endswith(b"\xff\xd9")


def check_declared_size(size: tuple[int, int], what: str, max_side: int) -> None:
    """Refuse a (width, height) outside the accepted sides, before anything is decoded."""
    width, height = size
    if min(width, height) < MIN_IMAGE_SIDE:
        raise InputError(f"{what} is {width}x{height}; each side must be at least {MIN_IMAGE_SIDE} pixels")
    if max(width, height) > max_side:
        raise InputError(
            f"{what} declares {width}x{height} pixels; the largest side allowed is {max_side} "
            "(refused before decoding)"
        )


#: Leading bytes of a PNG file, and of a JPEG one (SOI and the next marker's 0xFF).
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"
#: How much of a JPEG's end ``jpeg_is_complete`` reads (zero padding after the end marker included).
_JPEG_TAIL_BYTES = 4096
#: JPEG frame headers (SOF0..SOF15 less DHT, JPG and DAC), which carry the picture's size.
_JPEG_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: JPEG markers with no length field after them (TEM, RST0..RST7, SOI).
_JPEG_STANDALONE_MARKERS = frozenset({0x01, *range(0xD0, 0xD9)})
#: A marker: 0xFF (the last of any fill bytes), then a byte that is neither 0x00 nor 0xFF.
#: One 0xFF, not "\xff+": a long run of 0xFF would make the engine backtrack quadratically.
_JPEG_MARKER = re.compile(rb"\xff([^\x00\xff])")


def _png_size(data: bytes | memoryview) -> tuple[int, int]:
    """Width and height from the IHDR chunk, which the PNG standard puts first."""
    if len(data) < 24 or bytes(data[12:16]) != b"IHDR":
        raise InputError(f"PNG header cut short or without IHDR ({len(data)} bytes)")
    width, height = struct.unpack(">II", bytes(data[16:24]))
    return width, height


def _jpeg_size(data: bytes | memoryview) -> tuple[int, int]:
    """Width and height from the first frame header (SOFn), walking markers as libjpeg does.

    Fill bytes and stray data between segments are skipped, as libjpeg skips them (with a
    warning), so a JPEG that OpenCV would decode is not refused for them; the search runs in
    the regex engine, so a payload of junk costs a scan, not a Python loop per byte.
    """
    position, end = 2, len(data)
    while (found := _JPEG_MARKER.search(data, position)) is not None:
        marker, position = found.group(1)[0], found.end()
        if marker in _JPEG_STANDALONE_MARKERS:
            continue
        if marker in (0xD9, 0xDA) or position + 2 > end:  # EOI or a scan before any frame header
            break
        length = int.from_bytes(data[position : position + 2], "big")
        if marker in _JPEG_SOF_MARKERS:
            if length < 8 or position + 7 > end:
                break
            height = int.from_bytes(data[position + 3 : position + 5], "big")
            width = int.from_bytes(data[position + 5 : position + 7], "big")
            return width, height
        if length < 2:
            break
        position += length
    raise InputError(f"JPEG without a readable frame header (its size) in {end} bytes")


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


def resize_to_model(rgb: np.ndarray) -> np.ndarray:
    """uint8 RGB (H, W, 3) -> uint8 RGB (1008, 1008, 3): the model's resize, what every engine takes.

    Resampled like Sam3Processor: bilinear with antialiasing on the uint8 image, rounded back
    to uint8 by torchvision. Its output is channels-last in memory, so the (H, W, 3) array
    costs no copy; the normalisation is the engine's (``normalise``, or folded into the chip's
    patch embedding), so the host hands over a quarter of the bytes.
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
    return np.ascontiguousarray(resized.permute(1, 2, 0).numpy())


def normalise(image: np.ndarray) -> np.ndarray:
    """uint8 RGB (1008, 1008, 3) -> float32 (1, 3, 1008, 1008) in [-1, 1]: x / 255 * 2 - 1.

    Sam3Processor's normalisation (mean 0.5, std 0.5), in the same float32 operations (so the
    same bits). It runs in numpy, on one thread and in place, without torch's thread pool, whose
    workers stall when the cores are busy with other work, as a robot's are (`make bench`, host
    section).
    """
    pixels = np.empty((1, 3, *image.shape[:2]), dtype=np.float32)
    np.multiply(image.transpose(2, 0, 1), np.float32(1.0 / 255.0), out=pixels[0], dtype=np.float32)
    pixels -= np.float32(0.5)
    pixels /= np.float32(0.5)
    return pixels
