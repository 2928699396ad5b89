"""The suite's one PCC (Pearson correlation), the figure every gate between two implementations uses."""

from __future__ import annotations

from typing import Any

import numpy as np


def _flat(values: Any) -> np.ndarray:
    """numpy arrays and torch tensors (any dtype or device) as one float64 vector."""
    if hasattr(values, "detach"):
        values = values.detach().cpu().double().numpy()
    return np.ravel(np.asarray(values, dtype=np.float64))


def pcc(a: Any, b: Any) -> float:
    """Pearson correlation of two arrays or tensors of the same size, flattened.

    Constant inputs have no correlation; they give nan, which fails every `>=` gate.
    """
    a, b = _flat(a), _flat(b)
    if a.shape != b.shape:
        raise ValueError(f"pcc of {a.size} against {b.size} values")
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.corrcoef(a, b)[0, 1])
