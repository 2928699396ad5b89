"""A PNG bomb on image/compressed is refused from its header, at the node.

A 1.2 MB PNG of a 20000x20000 single colour would decode to a 1.2 GB bitmap. The node's peak
resident memory (VmHWM) stays within 100 MB of its level before the bomb, the refusal is counted
with its reason, and the next frame is answered.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import cv2
import pytest
from helpers.sam3_client import Sam3Client, log_tail, running_node, scene, stamp_now
from sensor_msgs.msg import CompressedImage

SUPPORT = Path(__file__).resolve().parents[1] / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

from image_bombs import png_bomb  # noqa: E402

BOMB_SIDE = 20000
PEAK_GROWTH_LIMIT = 100 * 1024 * 1024


@pytest.fixture(scope="module")
def sam3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sam3Client]:
    # Reliable input: a 1.2 MB message sent best effort can lose a fragment and never arrive.
    params = {
        "model_id": "tiny-random",
        "prompts": "[car]",
        "transport": "compressed",
        "qos_reliability": "reliable",
    }
    log_path = tmp_path_factory.mktemp("sam3") / "node.log"
    with running_node(params, log_path, wait_for_subscription=False) as client:
        client.wait_for_subscriber(compressed=True, timeout_s=120.0, process=client.process)
        yield client


def _png_frame(seed: int) -> CompressedImage:
    ok, encoded = cv2.imencode(".png", cv2.cvtColor(scene(seed=seed), cv2.COLOR_RGB2BGR))
    assert ok
    return CompressedImage(format="png", data=encoded.tobytes())


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set size so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


def test_png_bomb_is_refused_with_flat_peak_memory_and_the_next_frame_answered(sam3: Sam3Client) -> None:
    first = _png_frame(seed=1)
    detections, _ = sam3.ask(first)  # everything a frame needs is allocated by now
    assert detections.header == first.header
    before_status = sam3.next_diagnostics()
    before = peak_rss_bytes(sam3.process.pid)

    bomb = CompressedImage(format="png", data=png_bomb(BOMB_SIDE))
    bomb_key = stamp_now(bomb)
    sam3.send(bomb)
    status = sam3.next_diagnostics(
        timeout_s=30.0,
        where=lambda s: int(s["frames_rejected"]) == int(before_status["frames_rejected"]) + 1,
    )
    growth = peak_rss_bytes(sam3.process.pid) - before
    print(f"node peak RSS {before / 2**20:.0f} MB before the bomb, grew {growth / 2**20:.1f} MB")
    assert f"declares {BOMB_SIDE}x{BOMB_SIDE} pixels" in status["last_error"], status["last_error"]
    assert growth < PEAK_GROWTH_LIMIT, f"peak RSS grew {growth / 2**20:.0f} MB"

    good = _png_frame(seed=2)
    detections, _ = sam3.ask(good)
    assert detections.header == good.header
    assert bomb_key not in sam3.detections
    assert sam3.process.poll() is None, log_tail(sam3.log_path)
