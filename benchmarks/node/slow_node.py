"""The real /sam3 node, its engine slowed by a fixed sleep per image: a model slower than 30 Hz.

    python -m benchmarks.node.slow_node SECONDS --ros-args -p model_id:=tiny-random ...

Everything but the engine is the node's own code (main, lifecycle, newest-frame worker,
publishers, diagnostics). The slowdown is injected by wrapping the segmenter's engine as
the node builds it, since ``tt_sam3_ros.ros.main`` constructs Sam3Node itself.
"""

from __future__ import annotations

import sys
from typing import Any

from tt_sam3_ros.ros import main as process
from tt_sam3_ros.ros import node

from ..common.engines import SlowEngine


def slow_down(extra_seconds: float) -> None:
    """Make every Sam3Node built from now on wrap its engine in SlowEngine(extra_seconds)."""
    build = node.Sam3Node._build_segmenter

    def build_slowed(self: node.Sam3Node, request: dict[str, Any], device: str) -> Any:
        segmenter = build(self, request, device)
        segmenter.engine = SlowEngine(segmenter.engine, extra_seconds)
        return segmenter

    node.Sam3Node._build_segmenter = build_slowed


def main() -> int:
    slow_down(float(sys.argv[1]))
    return process.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
