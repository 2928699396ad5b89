"""The /sam3 node with devices:=[0, 1] on the REAL ttnn 0.81.1 library and two MOCK p150a boards
(one cluster descriptor, each chip on its own PCIe link, two Tensix columns harvested: 11x10 each),
two cameras: one ttnn engine per chip, frames dealt to whichever chip is free, both chips serving,
/diagnostics per chip, and SIGINT releasing both.

The real library opens both chips in one ttnn.CreateDevices call (BlackholeChips: chips opened one
call each are tied in 0.81.1, docs/design/facts.md, Mock p150a) and validates every op each engine
dispatches on its own chip, the chip prompt path's included (ttnn_prompt_path chip: the prompt
path's ops run on the chip every frame, where test_node_ttnn_mock.py's auto path falls back to the
host). Nothing computes on the mock (outputs read back as zeros), so what is asserted is where
frames went, what the node says about each chip, and the one answer zeros give: every kept query
scores sigmoid(0) * sigmoid(0), every mask pixel is background.
The engine runs without a trace there (TtnnEngine on TT_METAL_MOCK_CLUSTER_DESC_PATH).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from helpers.sam3_client import (
    Sam3Client,
    log_tail,
    make_image,
    mask_pixels,
    running_node,
    scene,
    stamp_ns,
    stop_node,
)
from helpers.ttnn_mock_node import FAILURE_MARKS, mock_environment
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_harness import WAIT_LIMIT_S, spin_until
from sensor_msgs.msg import Image
from vision_msgs.msg import Detection2DArray

CAMERAS = ("front", "rear")
MAX_INSTANCES = 4
NODE_PARAMS = {
    "model_id": "tiny-random",
    "engine": "ttnn",
    "ttnn_prompt_path": "chip",
    "devices": "[0, 1]",
    "cameras": str(list(CAMERAS)),
    "prompts": "['car']",
    "max_prompts": "1",
    "threshold": "0.0",
    "max_instances": str(MAX_INSTANCES),
    "max_image_side": "256",
    "tracking": "false",
}
#: What a detection scores when the chip reads back zeros: sigmoid(0) * sigmoid(0).
ZEROS_SCORE = 0.25
#: Most rounds of one frame per camera before both chips must have served: with both cameras'
#: frames sent at once, the chip free second takes the other camera's frame.
MOST_ROUNDS = 4
#: Liveness bounds, not speed checks (2 cores shared with other tests).
STARTUP_TIMEOUT_S = 420.0
ANSWER_TIMEOUT_S = 120.0
#: The real ttnn wheel runs these (the ubuntu24.04 row; other rows deselect them).
pytestmark = [
    pytest.mark.ttnn_wheel,
    pytest.mark.timeout(STARTUP_TIMEOUT_S + 2 * MOST_ROUNDS * ANSWER_TIMEOUT_S),
]


class Rig:
    """Both cameras' publishers, their outputs by stamp, and the latest /diagnostics by status name."""

    def __init__(self, client: Sam3Client, descriptor: str) -> None:
        self.client = client
        self.probe = client.probe
        self.descriptor = descriptor
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        publish = self.probe.create_publisher
        self.images = {name: publish(Image, f"{name}/image", reliable) for name in CAMERAS}
        self.detections: dict[str, dict[int, Detection2DArray]] = {name: {} for name in CAMERAS}
        self.masks: dict[str, dict[int, Image]] = {name: {} for name in CAMERAS}
        for name in CAMERAS:
            self.probe.create_subscription(
                Detection2DArray, f"/sam3/{name}/detections", self._store(self.detections[name]), reliable
            )
            masks = self._store(self.masks[name])
            self.probe.create_subscription(Image, f"/sam3/{name}/masks", masks, reliable)
        self.statuses: dict[str, dict[str, str]] = {}
        self.probe.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)

    @staticmethod
    def _store(into: dict):
        return lambda msg: into.__setitem__(stamp_ns(msg), msg)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            values["_level"] = str(int.from_bytes(status.level, "little"))
            self.statuses[status.name] = values

    def chip(self, name: str) -> dict[str, str]:
        return self.statuses.get(f"sam3: chip {name}", {})

    def served(self) -> dict[str, int]:
        """Frames each chip answered, as /diagnostics last said."""
        return {name: int(self.chip(name).get("frames_processed", "0")) for name in "01"}

    def send(self, camera: str, seed: int) -> Image:
        msg = make_image(scene(seed))
        msg.header.frame_id = f"{camera}_optical"
        self.images[camera].publish(msg)
        return msg

    def answered(self, camera: str, key: int) -> bool:
        return spin_until(
            self.probe,
            lambda: key in self.detections[camera] and key in self.masks[camera],
            ANSWER_TIMEOUT_S,
        )


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    folder = tmp_path_factory.mktemp("sam3_chips_ttnn_mock")
    env = mock_environment(folder, boards=2)
    log_path = folder / "node.log"
    with running_node(NODE_PARAMS, log_path, wait_for_subscription=False, env=env, cwd=folder) as client:
        rig = Rig(client, env["TT_METAL_MOCK_CLUSTER_DESC_PATH"])
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


def test_two_mock_chips_serve_two_cameras_and_stopping_releases_both(rig: Rig) -> None:
    log = rig.client.log_path.read_text(errors="replace")
    for chip in (0, 1):
        assert f"Blackhole chip {chip} open: worker dispatch, 11x10 compute grid, 2 command queues" in log, (
            log_tail(rig.client.log_path)
        )
    seed = answered = 0
    for _ in range(MOST_ROUNDS):  # rounds of one frame per camera, until both chips have served
        frames = {camera: rig.send(camera, seed := seed + 1) for camera in CAMERAS}
        for camera, frame in frames.items():
            key = stamp_ns(frame)
            assert rig.answered(camera, key), f"{camera} not answered\n{log_tail(rig.client.log_path)}"
            detections, mask = rig.detections[camera][key], rig.masks[camera][key]
            assert detections.header == frame.header and mask.header == frame.header
            assert (mask.encoding, mask.height, mask.width) == ("mono8", frame.height, frame.width)
            # The chip prompt path read back zeros: logit 0 and presence 0 score sigmoid(0) * sigmoid(0)
            # for each kept query (the host prompt path's scores differ: test_node_ttnn_mock.py),
            # and the zero mask logits leave every pixel background and every box empty.
            assert [d.results[0].hypothesis.score for d in detections.detections] == [
                ZEROS_SCORE
            ] * MAX_INSTANCES
            assert not mask_pixels(mask).any()
            assert all(d.bbox.size_x == d.bbox.size_y == 0.0 for d in detections.detections)
        answered += len(frames)
        counted = spin_until(rig.probe, lambda n=answered: sum(rig.served().values()) == n, WAIT_LIMIT_S)
        assert counted, f"the chips' frames_processed do not add up to {answered}: {rig.served()}"
        if all(rig.served().values()):
            break
    assert all(rig.served().values()), f"a chip served nothing in {answered} frames: {rig.served()}"
    segmentation = rig.statuses["sam3: segmentation"]
    assert segmentation["devices"] == "0, 1 (serving: 0, 1)", segmentation
    assert segmentation["prompt_path"] == "chip", segmentation
    for name in "01":
        chip = rig.chip(name)
        assert chip["state"] == "serving" and chip["_level"] == "0", chip
        assert chip["device"] == (
            f"Blackhole p150a {name} (mock: {rig.descriptor}, no trace), 11x10 compute grid, "
            "worker dispatch, 2 command queues"
        ), chip
        assert chip["engine_errors"] == "0" and chip["processing_ms_p50"], chip

    assert stop_node(rig.client.process) == 0, log_tail(rig.client.log_path)
    log = rig.client.log_path.read_text(errors="replace")
    for chip in (0, 1):
        assert log.count(f"engine released (chip {chip}): engine=ttnn") == 1, log_tail(rig.client.log_path)
    failures = [mark for mark in FAILURE_MARKS if mark in log]
    assert not failures, (failures, log_tail(rig.client.log_path))
