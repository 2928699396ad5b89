"""The /sam3 node with devices:=[0, 1] and four cameras in its own process, over real rclpy, on
two emulated chips: one ttnn engine per chip, every camera served, and a chip that stops
answering taken out of service while the other serves every camera.

The node imports ttnn as on a Blackhole host; test/support/emulated_ttnn answers with the TT-NN
emulator, told through the environment that the machine has two chips and which chips stop
answering (a file this test writes: a trace replay on a chip listed there fails as a lost device
would). The host prompt path keeps the warm-up to the image trace (the chip prompt path's own
node test is test_node_ttnn_emulated.py), and tiny frames keep each one to a few CPU-seconds.

Why this costs minutes of CPU rather than seconds: two engines start (weights uploaded, the
image trace compiled and captured on each chip) and about a dozen frames replay emulated
traces. It is the one test of the node over several chips' real engine code; the dealing,
the ordering and the failure rules themselves are checked in seconds by test/unit/test_chips.py
and test/unit/test_node_chips.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from helpers.sam3_client import Sam3Client, log_tail, make_image, running_node, scene, stamp_ns, stop_node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_harness import WAIT_LIMIT_S, spin_until
from sensor_msgs.msg import Image
from vision_msgs.msg import Detection2DArray

SUPPORT = Path(__file__).resolve().parents[1] / "support"
CAMERAS = ("front", "left", "right", "rear")
NODE_PARAMS = {
    "model_id": "tiny-random",
    "engine": "ttnn",
    "ttnn_prompt_path": "host",
    "devices": "[0, 1]",
    "cameras": str(list(CAMERAS)),
    "prompts": "['car']",
    "threshold": "0.0",
    "max_instances": "4",
    "max_image_side": "256",
}
#: A liveness bound, not a speed check: an emulated frame is several CPU-seconds, on 2 cores
#: shared with other tests.
ANSWER_TIMEOUT_S = 180.0
#: Start-up: imports, two engines' weights uploaded and image traces captured (emulated).
STARTUP_TIMEOUT_S = 480.0
#: Most bursts of one frame per camera before chip 1, failing every replay, must be out of
#: service (5 errors in a row): each burst gives it at least one frame, mostly three.
MOST_BURSTS_TO_LOSE_A_CHIP = 10
#: pytest.ini's 300 s per test counts the module's node start-up in the first test.
pytestmark = pytest.mark.timeout(STARTUP_TIMEOUT_S + 16 * ANSWER_TIMEOUT_S)


class Rig:
    """Four cameras' publishers, their outputs by stamp, and the latest /diagnostics by status name."""

    def __init__(self, client: Sam3Client, lost_chips: Path) -> None:
        self.client = client
        self.probe = client.probe
        self.lost_chips = lost_chips
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        self.images = {
            name: self.probe.create_publisher(Image, f"{name}/image", reliable) for name in CAMERAS
        }
        self.detections: dict[str, dict[int, Detection2DArray]] = {name: {} for name in CAMERAS}
        for name in CAMERAS:
            self.probe.create_subscription(
                Detection2DArray, f"/sam3/{name}/detections", self._store(self.detections[name]), reliable
            )
        self.statuses: dict[str, dict[str, str]] = {}
        self.arrays = 0
        self.probe.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)

    @staticmethod
    def _store(into: dict):
        return lambda msg: into.__setitem__(stamp_ns(msg), msg)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            values["_level"] = str(int.from_bytes(status.level, "little"))
            values["_message"] = status.message
            self.statuses[status.name] = values
        self.arrays += 1

    def chip(self, name: str) -> dict[str, str]:
        return self.statuses.get(f"sam3: chip {name}", {})

    def fresh_diagnostics(self) -> None:
        """Wait for the next /diagnostics array, so ``statuses`` says what holds now."""
        seen = self.arrays
        assert spin_until(self.probe, lambda: self.arrays > seen, WAIT_LIMIT_S), "no /diagnostics"

    def send(self, camera: str, seed: int) -> int:
        msg = make_image(scene(seed))
        msg.header.frame_id = f"{camera}_optical"
        self.images[camera].publish(msg)
        return stamp_ns(msg)

    def answered(self, camera: str, key: int) -> bool:
        return spin_until(self.probe, lambda: key in self.detections[camera], ANSWER_TIMEOUT_S)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    folder = tmp_path_factory.mktemp("sam3_chips")
    lost_chips = folder / "lost_chips"
    path = os.pathsep.join([str(SUPPORT / "emulated_ttnn"), str(SUPPORT), os.environ.get("PYTHONPATH", "")])
    env = {"PYTHONPATH": path, "TTNN_EMULATOR_CHIPS": "2", "TTNN_EMULATOR_LOST_CHIPS_FILE": str(lost_chips)}
    log_path = folder / "node.log"
    with running_node(NODE_PARAMS, log_path, wait_for_subscription=False, env=env) as client:
        rig = Rig(client, lost_chips)
        subscribed = spin_until(
            rig.probe,
            lambda: (
                all(p.get_subscription_count() for p in rig.images.values())
                or client.process.poll() is not None
            ),
            STARTUP_TIMEOUT_S,
        )
        assert subscribed and client.process.poll() is None, log_tail(log_path)
        yield rig


def _four_cameras_are_served_by_both_emulated_chips(rig: Rig) -> None:
    log = rig.client.log_path.read_text(errors="replace")
    for chip in (0, 1):
        assert f"Blackhole chip {chip} open: worker dispatch, 11x10 compute grid" in log, log_tail(
            rig.client.log_path
        )
    seed = 0
    for _ in range(3):  # rounds of one frame per camera, until both chips have served
        keys = {camera: rig.send(camera, seed := seed + 1) for camera in CAMERAS}
        for camera, key in keys.items():
            assert rig.answered(camera, key), f"{camera} not answered\n{log_tail(rig.client.log_path)}"
            assert rig.detections[camera][key].header.frame_id == f"{camera}_optical"
        counted = spin_until(rig.probe, lambda seed=seed: sum(_served(rig).values()) == seed, WAIT_LIMIT_S)
        assert counted, (
            f"the chips' frames_processed do not add up to the {seed} frames answered: {_served(rig)}"
        )
        if all(_served(rig).values()):
            break
    assert all(_served(rig).values()), f"a chip served nothing: {_served(rig)}"
    segmentation = rig.statuses["sam3: segmentation"]
    assert segmentation["devices"] == "0, 1 (serving: 0, 1)"
    assert "(emulated)" in segmentation["device"]
    for name in "01":
        assert rig.chip(name)["state"] == "serving" and rig.chip(name)["_level"] == "0", rig.chip(name)
        assert f"Blackhole p150a {name} (emulated)" in rig.chip(name)["device"]
        assert rig.chip(name)["processing_ms_p50"], "the chip's latency percentiles are reported"


def _a_chip_that_stops_answering_is_taken_out_and_the_other_serves_every_camera(rig: Rig) -> None:
    rig.lost_chips.write_text("1\n")
    seed = 100
    for _ in range(MOST_BURSTS_TO_LOSE_A_CHIP):
        # One frame per camera at once: while chip 0 answers one, chip 1 fails the others quickly.
        errors = {camera: _camera_errors(rig, camera) for camera in CAMERAS}
        keys = {camera: rig.send(camera, seed := seed + 1) for camera in CAMERAS}
        done = spin_until(
            rig.probe,
            lambda keys=keys, errors=errors: all(
                key in rig.detections[camera] or _camera_errors(rig, camera) > errors[camera]
                for camera, key in keys.items()
            ),
            ANSWER_TIMEOUT_S,
        )
        assert done, f"frames neither answered nor failed\n{log_tail(rig.client.log_path)}"
        if rig.chip("1").get("state") == "out of service":
            break
    assert rig.chip("1").get("state") == "out of service", rig.chip("1")
    rig.fresh_diagnostics()
    chip_1 = rig.chip("1")
    assert chip_1["_level"] == "2", chip_1
    assert chip_1["_message"].startswith("out of service: 5 frames in a row failed in the engine"), chip_1
    assert "chip 1 lost: the device does not answer" in chip_1["out_of_service_reason"], chip_1
    assert rig.statuses["sam3: segmentation"]["devices"] == "0, 1 (serving: 0)"
    assert "chip 1 taken out of service" in rig.client.log_path.read_text(errors="replace")
    served_on_1 = _served(rig)["1"]
    keys = {camera: rig.send(camera, 200 + index) for index, camera in enumerate(CAMERAS)}
    for camera, key in keys.items():
        assert rig.answered(camera, key), f"{camera} not served by chip 0\n{log_tail(rig.client.log_path)}"
    rig.fresh_diagnostics()
    assert _served(rig)["1"] == served_on_1, "a chip out of service served a frame"
    assert rig.chip("0")["_level"] == "0" and rig.client.process.poll() is None
    assert rig.client.state() == "active"


def _served(rig: Rig) -> dict[str, int]:
    """Frames each chip answered, as /diagnostics last said."""
    return {name: int(rig.chip(name).get("frames_processed", "0")) for name in "01"}


def _camera_errors(rig: Rig, camera: str) -> int:
    """Frames of ``camera`` that failed in an engine, as /diagnostics last said."""
    return int(rig.statuses.get(f"sam3: camera {camera}", {}).get("engine_errors", "0"))


def _stopping_the_node_releases_every_chip(rig: Rig) -> None:
    """SIGINT: the serving chip's engine closes, the one out of service was closed when it left
    service; the process exits 0."""
    assert stop_node(rig.client.process) == 0, log_tail(rig.client.log_path)
    log = rig.client.log_path.read_text(errors="replace")
    for chip in (0, 1):
        assert log.count(f"engine released (chip {chip})") == 1, log_tail(rig.client.log_path)
    assert log.index("chip 1 taken out of service") < log.index("engine released (chip 1)")


def test_two_chips_serve_four_cameras_until_one_stops_answering_and_stopping_releases_both(rig: Rig) -> None:
    """One node's life in one test: each step starts from the state the step before leaves (a
    chip out of service stays out; a stopped node is gone), so the steps cannot run in another
    order as tests of their own."""
    _four_cameras_are_served_by_both_emulated_chips(rig)
    _a_chip_that_stops_answering_is_taken_out_and_the_other_serves_every_camera(rig)
    _stopping_the_node_releases_every_chip(rig)
