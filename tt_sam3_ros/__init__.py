"""tt_sam3_ros: Meta's SAM 3 text-prompted instance segmentation for ROS 2.

Packages, each with the rule of what it may import (docs/design/layout.md, kept by
test/unit/test_layout.py): ``core`` (the library, no ROS), ``runtime`` (the node's threads, no
ROS), ``engines`` and ``weights`` (the model on a chip or in torch), ``ros`` (the ROS 2 node) and
``cli`` (the ``tt-sam3`` command).

The Python API's names are importable from here; each is loaded on first use, so ``import
tt_sam3_ros`` costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: The Python API (docs/python_api.md): name -> the module that defines it.
_API = {
    "Sam3Segmenter": "tt_sam3_ros.core.segmenter",
    "SegmentationResult": "tt_sam3_ros.core.results",
    "Instance": "tt_sam3_ros.core.results",
    "Exemplar": "tt_sam3_ros.core.exemplars",
    "InputError": "tt_sam3_ros.core.errors",
    "Sam3Tracker": "tt_sam3_ros.core.tracking",
    "TrackIdSpace": "tt_sam3_ros.core.tracking",
    "InstanceTracker": "tt_sam3_ros.core.tracking",
    "Sam3VideoTracker": "tt_sam3_ros.core.video_tracker",
    "EngineError": "tt_sam3_ros.engines.base",
    "WeightsError": "tt_sam3_ros.weights.errors",
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'tt_sam3_ros' has no attribute {name!r}")
    return getattr(importlib.import_module(_API[name]), name)
