"""Run the real sam3 node with its segmenter instrumented for fault and release tests.

- A frame whose top-left pixel is ``FAULT_PIXEL`` makes the engine's decoder raise
  mid-inference (after the image encoder ran), as a device fault would.
- ``$SAM3_BUILD_DELAY_S`` seconds are slept before the segmenter is built, so a test can
  talk to the node while it configures (a first hub download or a device compile is slow).
- ``$SAM3_WARMUP_DELAY_S``, ``$SAM3_FRAME_DELAY_S`` and ``$SAM3_CLOSE_DELAY_S`` seconds are
  slept at the start of the warm-up, of each frame and of the close, each after printing
  ``<phase> delayed`` (a first warm-up on a chip, a full-size frame on a CPU, a slow device close),
  so a test can stop the node in the middle of one.
- ``$SAM3_WATCHDOG`` (``factor,min_s``) replaces the chip watchdog's defaults (10, 30 s), so a
  test sees a hung frame taken out in seconds.
- Every ``Sam3Segmenter.close()`` appends a line to the file named by ``$SAM3_CLOSE_LOG``,
  so a test can see that the device was released, and how often.

Only this test process is patched; the package has no fault flag. Usage:
``python faulty_node.py --ros-args -p model_id:=tiny-random ...``.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from typing import Any

import numpy as np

from tt_sam3_ros.core.segmenter import Sam3Segmenter
from tt_sam3_ros.ros import main as process
from tt_sam3_ros.ros import node
from tt_sam3_ros.runtime import chips

FAULT_PIXEL = (13, 37, 66)
FAULT_MESSAGE = "injected engine fault"


def _faulty_decode(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(FAULT_MESSAGE)


def _delay(phase: str) -> None:
    """Sleep ``$SAM3_<PHASE>_DELAY_S`` seconds, saying so first (a test waits for the line)."""
    delay_s = float(os.environ.get(f"SAM3_{phase.upper()}_DELAY_S", "0"))
    if delay_s > 0:
        print(f"{phase} delayed {delay_s} s", file=sys.stderr, flush=True)
        time.sleep(delay_s)


def install() -> None:
    """Patch Sam3Segmenter in this process: fault on FAULT_PIXEL frames, delays, record close()."""
    original_call = Sam3Segmenter.__call__
    original_close = Sam3Segmenter.close
    original_warmup = Sam3Segmenter.warmup

    def warmup(self: Sam3Segmenter) -> None:
        _delay("warmup")
        original_warmup(self)

    def call(self: Sam3Segmenter, image: Any, prompts: list[str], **kwargs: Any) -> Any:
        _delay("frame")
        if tuple(int(v) for v in np.asarray(image)[0, 0, :3]) != FAULT_PIXEL:
            return original_call(self, image, prompts, **kwargs)
        self.engine.decode = _faulty_decode  # shadows the engine's method for this call only
        try:
            return original_call(self, image, prompts, **kwargs)
        finally:
            del self.engine.decode

    def close(self: Sam3Segmenter) -> None:
        _delay("close")
        original_close(self)
        with open(os.environ.get("SAM3_CLOSE_LOG", os.devnull), "a") as log:
            log.write(f"closed on thread {threading.current_thread().name}\n")

    Sam3Segmenter.__call__ = call
    Sam3Segmenter.close = close
    Sam3Segmenter.warmup = warmup

    build = node.Sam3Node._build_segmenter
    delay_s = float(os.environ.get("SAM3_BUILD_DELAY_S", "0"))

    def slow_build(self: node.Sam3Node, request: dict[str, Any], device: str) -> Any:
        time.sleep(delay_s)
        return build(self, request, device)

    node.Sam3Node._build_segmenter = slow_build
    if watchdog := os.environ.get("SAM3_WATCHDOG"):
        factor, min_s = (float(value) for value in watchdog.split(","))
        chips.Watchdog = functools.partial(chips.Watchdog, factor=factor, min_s=min_s)


if __name__ == "__main__":
    install()
    sys.exit(process.main())
