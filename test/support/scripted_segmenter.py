"""A scripted stand-in for Sam3Segmenter, for the node's tests (test_node_engine_faults,
test_node_chips): answers every frame with no instance, or fails where told to, and counts its
frames and closes, so a test can read what the node did with a failing engine.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from tt_sam3_ros.core.results import SegmentationResult


class ScriptedSegmenter:
    """Stands in for Sam3Segmenter (one chip's, with ``chip``): answers with no instance; raises
    ``fail_with`` on every frame while it is set, and fails warm-up with ``fail_warmup``; counts
    its frames (``calls``) and closes (``closed``). With ``gate``, each frame waits for the gate
    to open (a slow engine, a frame held in flight) once ``entered`` says it is in the call."""

    max_image_side = 4096

    def __init__(
        self,
        chip: str | None = None,
        fail_with: Exception | None = None,
        fail_warmup: bool = False,
        gate: threading.Event | None = None,
    ) -> None:
        self.chip = chip
        self.fail_with = fail_with
        self.fail_warmup = fail_warmup
        self.calls = 0
        self.closed = 0
        self.gate = gate
        self.entered = threading.Event()

    def describe(self) -> dict[str, str]:
        device = "none" if self.chip is None else f"scripted chip {self.chip}"
        return {"engine": "scripted", "device": device, "dtype": "none"}

    def warmup(self) -> None:
        if self.fail_warmup:
            raise RuntimeError("trace capture failed")

    def close(self) -> None:
        self.closed += 1

    def __call__(self, rgb: np.ndarray, prompts: list[str], **_: Any) -> SegmentationResult:
        self.calls += 1
        self.entered.set()
        if self.gate is not None:
            self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        return SegmentationResult(image_size=rgb.shape[:2], prompts=list(prompts), instances=[], presence={})
