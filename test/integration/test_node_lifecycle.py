"""The node's lifecycle, engine faults and compressed input, through its own services.

One node (autostart false) is shared by the module: unconfigured, configure, activate, an
engine fault and recovery, deactivate, compressed transport, cleanup and configure again. Each
test first drives it to the state and transport it starts from (helpers/lifecycle.py ``reach``,
through the same lifecycle services ``ros2 lifecycle set`` calls), so the tests pass in any
order. It is the real node with its segmenter instrumented by helpers/faulty_node.py (a fault
on a marked frame, a line per close()); nothing in the package knows about the
instrumentation. SIGTERM, which ends a node, has its own in test_node_lifecycle_sigterm.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers.faulty_node import FAULT_MESSAGE, FAULT_PIXEL
from helpers.lifecycle import closes, lifecycle_node, reach
from helpers.sam3_client import Sam3Client, log_tail, make_image, scene, stamp_now
from lifecycle_msgs.msg import Transition
from ros_harness import WAIT_LIMIT_S, spin_until
from sensor_msgs.msg import CompressedImage

OK, WARN, ERROR = 0, 1, 2


@pytest.fixture(scope="module")
def sam3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sam3Client]:
    with lifecycle_node(tmp_path_factory.mktemp("sam3_lifecycle")) as client:
        yield client


def _compressed(rgb: np.ndarray, extension: str) -> CompressedImage:
    ok, encoded = cv2.imencode(extension, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    msg = CompressedImage(format=extension.lstrip("."))
    msg.header.frame_id = "cam"
    msg.data = encoded.tobytes()
    return msg


def test_unconfigured_holds_no_engine(sam3: Sam3Client) -> None:
    reach(sam3, "unconfigured")
    status = sam3.next_diagnostics(where=lambda s: s["state"] == "unconfigured")
    assert status["state"] == "unconfigured"
    assert status["_level"] == WARN
    assert sam3.image_pub.get_subscription_count() == 0
    # Parameters read at configure may change now, and only now.
    assert sam3.set_parameter("max_image_side", 2048).successful


def test_configure_loads_the_engine_but_does_not_subscribe(sam3: Sam3Client) -> None:
    reach(sam3, "unconfigured")
    assert sam3.transition(Transition.TRANSITION_CONFIGURE)
    assert sam3.state() == "inactive"
    status = sam3.next_diagnostics(where=lambda s: s["state"] == "inactive")
    assert status["engine"] == "torch"
    spin_until(sam3.probe, lambda: False, 0.5)
    assert sam3.image_pub.get_subscription_count() == 0
    refused = sam3.set_parameter("max_image_side", 1024)
    assert not refused.successful and "read at configure" in refused.reason


def test_activate_serves_frames(sam3: Sam3Client) -> None:
    reach(sam3, "inactive", transport="raw")
    assert sam3.transition(Transition.TRANSITION_ACTIVATE)
    assert sam3.state() == "active"
    sam3.wait_for_subscriber()
    frame = make_image(scene(seed=1))
    detections, mask = sam3.ask(frame)
    assert detections.header == frame.header and mask.header == frame.header
    assert {sam3.prompt_of(d) for d in detections.detections} == {"cup"}


def test_an_engine_fault_is_reported_and_the_node_recovers(sam3: Sam3Client) -> None:
    reach(sam3, "active", transport="raw")
    sam3.wait_for_subscriber()
    before = sam3.next_diagnostics(where=lambda s: s["state"] == "active")
    picture = scene(seed=2)
    picture[0, 0] = FAULT_PIXEL
    faulty = make_image(picture)
    faulty_key = stamp_now(faulty)
    sam3.send(faulty)
    status = sam3.next_diagnostics(where=lambda s: s["_level"] == ERROR)
    assert FAULT_MESSAGE in status["last_error"] and FAULT_MESSAGE in status["_message"]
    assert int(status["engine_errors"]) == int(before["engine_errors"]) + 1
    assert faulty_key not in sam3.detections
    assert sam3.process.poll() is None, log_tail(sam3.log_path)

    healthy = make_image(scene(seed=3))
    detections, _ = sam3.ask(healthy)
    assert detections.header == healthy.header
    recovered = sam3.next_diagnostics(where=lambda s: s["_level"] == OK)
    assert int(recovered["frames_processed"]) > int(status["frames_processed"])
    assert "Traceback" in Path(sam3.log_path).read_text(), "an engine fault is logged with its traceback"


def test_deactivate_stops_inference_and_keeps_the_engine(sam3: Sam3Client) -> None:
    reach(sam3, "active", transport="raw")
    closed = closes(sam3)
    assert sam3.transition(Transition.TRANSITION_DEACTIVATE)
    assert sam3.state() == "inactive"
    assert spin_until(sam3.probe, lambda: sam3.image_pub.get_subscription_count() == 0, WAIT_LIMIT_S)
    frame = make_image(scene(seed=4))
    key = stamp_now(frame)
    sam3.send(frame)
    assert sam3.no_answer(key, wait_s=2.0)
    assert closes(sam3) == closed, "deactivate must not release the engine"
    status = sam3.next_diagnostics(where=lambda s: s["state"] == "inactive")
    assert status["_level"] == WARN


def test_compressed_transport_after_reactivation(sam3: Sam3Client) -> None:
    reach(sam3, "inactive")
    assert sam3.set_parameter("transport", "compressed").successful  # inactive: allowed
    assert sam3.transition(Transition.TRANSITION_ACTIVATE)
    refused = sam3.set_parameter("transport", "raw")
    assert not refused.successful and "read at activate" in refused.reason
    sam3.wait_for_subscriber(compressed=True)
    for extension in (".jpg", ".png"):
        frame = _compressed(scene(seed=5), extension)
        detections, mask = sam3.ask(frame)
        assert detections.header == frame.header
        assert (mask.width, mask.height) == (96, 64)

    before = sam3.next_diagnostics()
    corrupt = CompressedImage(format="jpeg", data=b"\xff\xd8\xff\xe0" + bytes(300))
    corrupt_key = stamp_now(corrupt)
    sam3.send(corrupt)
    status = sam3.next_diagnostics(
        where=lambda s: int(s["frames_rejected"]) == int(before["frames_rejected"]) + 1
    )
    assert "corrupt compressed image" in status["last_error"]
    good = _compressed(scene(seed=6), ".jpg")
    detections, _ = sam3.ask(good)
    assert detections.header == good.header
    assert corrupt_key not in sam3.detections


def test_cleanup_releases_the_engine_and_configure_acquires_it_again(sam3: Sam3Client) -> None:
    reach(sam3, "active", transport="compressed")
    closed = closes(sam3)
    released = Path(sam3.log_path).read_text().count("engine released")
    assert sam3.transition(Transition.TRANSITION_DEACTIVATE)
    assert sam3.transition(Transition.TRANSITION_CLEANUP)
    assert sam3.state() == "unconfigured"
    assert closes(sam3) == [*closed, "closed on thread sam3-inference"], (
        "closed once, on the engine's own thread"
    )
    assert Path(sam3.log_path).read_text().count("engine released") == released + 1

    assert sam3.transition(Transition.TRANSITION_CONFIGURE)
    assert sam3.transition(Transition.TRANSITION_ACTIVATE)
    sam3.wait_for_subscriber(compressed=True)
    frame = _compressed(scene(seed=7), ".png")
    detections, _ = sam3.ask(frame)
    assert detections.header == frame.header
