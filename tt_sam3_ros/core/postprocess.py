"""Raw model outputs -> instances in source pixels. One copy for every engine.

Scores follow SAM 3: sigmoid(query logit) * sigmoid(presence logit), kept when above
the threshold. Boxes come out normalised to the squashed 1008x1008 input, so they
scale straight back to source pixels. Masks are the 288x288 logits upsampled
bilinearly (align_corners=False, the convention of torch's F.interpolate that SAM 3
uses) to the source size and thresholded at 0.

The upsample is computed only inside the window where it can be positive: a
bilinear sample is a convex combination of four logits, so it is > 0 only if one of
them is. The window is derived from the positive logits' bounding rows and columns,
and every pixel outside it is exactly 0 in the full-image upsample too, so the crop
gives the same mask as upsampling the whole image, at a cost that scales with the
object's area instead of the image's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class Selection:
    """Queries that passed the threshold, best first (K entries each)."""

    prompt_index: np.ndarray  # int64 (K,)
    query_index: np.ndarray  # int64 (K,)
    scores: np.ndarray  # float32 (K,)


def sigmoid(values: np.ndarray) -> np.ndarray:
    """Logistic function in float32, accurate to a few ulp over the whole range.

    Written as 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below: e^-|x| never overflows, and
    nothing is subtracted, so weak scores keep their relative precision instead of cancelling
    to 0.0 (which ``1 - 1 / (1 + e^|x|)`` does from x = -17 on).
    """
    values = np.asarray(values, dtype=np.float32)
    decay = np.exp(-np.abs(values))
    return np.where(values >= 0, np.float32(1), decay) / (1 + decay)


def select_instances(
    logits: np.ndarray, presence: np.ndarray, threshold: float, max_instances: int
) -> Selection:
    """Pick the (prompt, query) pairs scoring above ``threshold``, highest first.

    Args:
        logits: float32 (P, Q) query logits.
        presence: float32 (P,) presence logits.
    """
    scores = sigmoid(logits) * sigmoid(presence)[:, None]
    prompt_index, query_index = np.nonzero(scores > threshold)
    kept = scores[prompt_index, query_index]
    # Stable sort: equal scores keep prompt order, then query order.
    order = np.argsort(-kept, kind="stable")[:max_instances]
    return Selection(prompt_index[order], query_index[order], kept[order].astype(np.float32))


def boxes_to_source(boxes: np.ndarray, image_size: tuple[int, int]) -> np.ndarray:
    """Normalised x1 y1 x2 y2 (K, 4) -> float64 source pixels, clamped to the image."""
    height, width = image_size
    scale = np.array([width, height, width, height], dtype=np.float64)
    pixels = np.asarray(boxes, dtype=np.float64) * scale
    return np.clip(pixels, 0.0, scale)


@lru_cache(maxsize=64)
def _axis_weights(out_size: int, in_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Source indices and weights of a bilinear, align_corners=False resize along one axis.

    Returns (i0, i1, w0, w1): output position o samples w0[o] * x[i0[o]] + w1[o] * x[i1[o]].
    The source coordinate (o + 0.5) * scale - 0.5 is rounded once, as torch's kernel
    computes it with a fused multiply-add; the float32 weights then equal torch's.
    """
    scale = np.float64(np.float32(in_size / out_size))
    source = ((np.arange(out_size, dtype=np.float64) + 0.5) * scale - 0.5).astype(np.float32)
    source = np.maximum(source, np.float32(0))
    i0 = np.minimum(np.floor(source).astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    w1 = (source - i0).astype(np.float32)
    w0 = (np.float32(1) - w1).astype(np.float32)
    for array in (i0, i1, w0, w1):
        array.setflags(write=False)
    return i0, i1, w0, w1


def _axis_window(out_size: int, in_size: int, first: int, last: int) -> slice | None:
    """Output range whose samples touch source cells first..last; None if no sample does."""
    i0, i1, _, _ = _axis_weights(out_size, in_size)
    touches = np.nonzero((i0 <= last) & (i1 >= first))[0]
    if touches.size == 0:
        return None
    return slice(int(touches[0]), int(touches[-1]) + 1)


def positive_window(logits: np.ndarray, out_size: tuple[int, int]) -> tuple[slice, slice] | None:
    """Output rows and columns outside which the upsampled mask is certainly <= 0.

    None when no logit is positive (the mask is empty).
    """
    positive = logits > 0
    rows = np.nonzero(positive.any(axis=1))[0]
    if rows.size == 0:
        return None
    cols = np.nonzero(positive.any(axis=0))[0]
    row_window = _axis_window(out_size[0], logits.shape[0], rows[0], rows[-1])
    col_window = _axis_window(out_size[1], logits.shape[1], cols[0], cols[-1])
    if row_window is None or col_window is None:
        return None  # no output pixel samples a positive logit (tiny images)
    return row_window, col_window


def upsample_window(logits: np.ndarray, out_size: tuple[int, int], rows: slice, cols: slice) -> np.ndarray:
    """Bilinear upsample of 2-D ``logits`` to ``out_size``, evaluated only on [rows, cols].

    float32; each output is (w0*x00 + w1*x01)*h0 + (w0*x10 + w1*x11)*h1, so any window
    of the full result is bit-identical to the same window computed alone.

    Separable: the column pass runs once per source row the window reads (about 1/3.75 of
    the output rows for 288 -> 1080), and the row pass then only copies those rows out, so a
    window costs a fraction of interpolating every output pixel from its four corners.
    Every product and sum is the same float32 operation on the same operands, so the result
    is bit-identical to the four-corner formula.
    """
    r0, r1, h0, h1 = (a[rows] for a in _axis_weights(out_size[0], logits.shape[0]))
    c0, c1, w0, w1 = (a[cols] for a in _axis_weights(out_size[1], logits.shape[1]))
    first = int(r0[0])
    band = logits[first : int(r1[-1]) + 1]
    across = np.take(band, c0, axis=1)
    across *= w0
    right = np.take(band, c1, axis=1)
    right *= w1
    across += right
    upper = np.take(across, r0 - first, axis=0)
    upper *= h0[:, None]
    lower = np.take(across, r1 - first, axis=0)
    lower *= h1[:, None]
    upper += lower
    return upper


def upsample_full(logits: np.ndarray, out_size: tuple[int, int]) -> np.ndarray:
    """The whole-image upsample (the reference the windowed path must equal)."""
    return upsample_window(logits, out_size, slice(0, out_size[0]), slice(0, out_size[1]))


def mask_crop(logits: np.ndarray, out_size: tuple[int, int]) -> tuple[np.ndarray, tuple[int, int]]:
    """Mask of one query at the source size, as (bool crop, (row, col) origin).

    Equal, pixel for pixel, to ``upsample_full(logits, out_size) > 0``.
    """
    window = positive_window(logits, out_size)
    if window is None:
        return np.zeros((0, 0), dtype=bool), (0, 0)
    rows, cols = window
    return upsample_window(logits, out_size, rows, cols) > 0, (rows.start, cols.start)
