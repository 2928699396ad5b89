"""SIGTERM ends the node with exit 0 and releases its engine, also one acquired again after a
cleanup. A module of its own: the node it ends is its own, and no other /sam3 node runs beside
it (two nodes of one name would answer each other's services and topics)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from helpers.lifecycle import closes, lifecycle_node, reach
from helpers.sam3_client import log_tail, make_image, scene
from ros_harness import WAIT_LIMIT_S


def test_sigterm_exits_0_and_releases_the_engine(tmp_path: Path) -> None:
    """A node of its own: it starts unconfigured, holds a second engine after cleanup and
    configure again, serves a frame, and SIGTERM releases that engine too."""
    with lifecycle_node(tmp_path) as sam3:
        assert sam3.state() == "unconfigured"
        reach(sam3, "active")
        reach(sam3, "unconfigured")
        reach(sam3, "active", transport="raw")
        sam3.wait_for_subscriber()
        frame = make_image(scene(seed=8))
        detections, _ = sam3.ask(frame)
        assert detections.header == frame.header
        started = time.monotonic()
        sam3.process.send_signal(signal.SIGTERM)
        exit_code = sam3.process.wait(timeout=WAIT_LIMIT_S)
        elapsed = time.monotonic() - started
        log = Path(sam3.log_path).read_text()
        assert exit_code == 0, log_tail(sam3.log_path)
        assert len(closes(sam3)) == 2, "the second engine was released too"
        assert log.count("engine released") == 2
        assert "Traceback" not in log.split("engine released")[-1]
        print(f"\nSIGTERM to exit: {elapsed:.2f} s")
