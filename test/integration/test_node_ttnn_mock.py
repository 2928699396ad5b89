"""The /sam3 node with engine ttnn on the REAL ttnn 0.81.1 library and a MOCK p150a (no card),
started from the command line the launch file gives ``ros2 launch ... engine:=ttnn``, and driven
as a user's stack drives it: frames in, detections, masks and /diagnostics out, its lifecycle,
SIGINT.

What the real library does here that the emulator (test_node_ttnn_emulated.py) cannot: it opens the
chip from a cluster descriptor with two Tensix columns harvested (11x10, like a real p150a), and
validates every op the engine dispatches on the node's own threads (argument, layout and
program-config checks, circular buffers, the real allocator). What it cannot do: compute. Every
device output reads back as zeros (docs/design/facts.md, Mock p150a), so:
- every warm-up check on the chip fails (their inputs are not zeros) and its stage falls back: the
  diagnostics must say so, stage by stage, with the check's figure;
- the image path's maps are zeros whatever the frame, so with the auto prompt path (its chip check
  fails too: the host's serves) every frame gets the same answer, the host prompt path's over
  zero maps. That is what these tests assert on the answers (the torch engine, which sees the
  image, answers two frames differently: the control). Scores and masks mean nothing beyond it.
The engine runs without a trace on a mock cluster (ttnn 0.81.1 segfaults in wait_for_event and
trace capture there; TtnnEngine checks for TT_METAL_MOCK_CLUSTER_DESC_PATH).

One node for the module; its tests run in order and the last one stops it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers.launch_command import launch_arguments, launch_file, node_command
from helpers.sam3_client import (
    Sam3Client,
    log_tail,
    make_image,
    mask_pixels,
    running_node,
    scene,
    stamp_now,
    stop_node,
)
from helpers.ttnn_mock_node import FAILURE_MARKS, mock_environment
from lifecycle_msgs.msg import Transition
from ros_harness import WAIT_LIMIT_S, spin_until
from sensor_msgs.msg import Image
from vision_msgs.msg import Detection2DArray

from tt_sam3_ros.engines import CHECKED_STAGES

PROMPTS = ["car"]
MAX_INSTANCES = 6
#: The launch arguments a user gives (all strings, as on the command line).
LAUNCH_ARGUMENTS = {
    "engine": "ttnn",
    "device": "0",
    "model_id": "tiny-random",
    "prompts": "car",
    "threshold": "0.0",
}
#: The user's params file: the package's config/sam3.yaml with these values changed (one prompt
#: bucket, small frames, ids by position).
PARAMS_FILE_CHANGES = {
    "max_prompts": 1,
    "max_instances": MAX_INSTANCES,
    "max_image_side": 256,
    "tracking": False,
}
#: Liveness bounds, not speed checks: the 2 cores are shared with other tests (one run here logged
#: "configured in 36.8 s").
STARTUP_TIMEOUT_S = 300.0
ANSWER_TIMEOUT_S = 120.0
#: The real ttnn wheel runs these (the ubuntu24.04 row; other rows deselect them).
pytestmark = [pytest.mark.ttnn_wheel, pytest.mark.timeout(STARTUP_TIMEOUT_S + 6 * ANSWER_TIMEOUT_S)]


def _params_file(folder: Path) -> Path:
    """config/sam3.yaml with PARAMS_FILE_CHANGES, written to ``folder``."""
    config = yaml.safe_load(Path(launch_arguments()["params_file"]).read_text())
    config["/**"]["ros__parameters"].update(PARAMS_FILE_CHANGES)
    path = folder / "mock_p150a.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def sam3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sam3Client]:
    folder = tmp_path_factory.mktemp("sam3_ttnn_mock")
    env = mock_environment(folder)
    arguments = launch_arguments(**LAUNCH_ARGUMENTS, params_file=str(_params_file(folder)))
    command = node_command(arguments, folder)
    with running_node(
        {}, folder / "node.log", command, env=env, startup_timeout_s=STARTUP_TIMEOUT_S, cwd=folder
    ) as client:
        client.descriptor = env["TT_METAL_MOCK_CLUSTER_DESC_PATH"]
        yield client


@pytest.fixture(scope="module")
def torch_segmenter() -> Iterator[object]:
    """The torch engine on the same tiny model: it sees the image, the mock chip does not."""
    from tt_sam3_ros.core.segmenter import Sam3Segmenter

    with Sam3Segmenter.from_pretrained(model_id="tiny-random", engine="torch", device="cpu") as host:
        yield host


def _log(sam3: Sam3Client) -> str:
    return sam3.log_path.read_text(errors="replace")


def _ask(sam3: Sam3Client, frame: Image) -> tuple[Detection2DArray, Image]:
    """Send ``frame`` until the node counts it received (a best-effort frame sent before the node's
    side of the subscription matched is lost), then wait for its answer."""
    key = stamp_now(frame)
    for _ in range(5):
        before = int(sam3.next_diagnostics()["frames_received"])
        sam3.send(frame)
        if spin_until(sam3.probe, lambda count=before: _received(sam3, key, count), 5.0):
            break
    return sam3.answer(key, timeout_s=ANSWER_TIMEOUT_S)


def _received(sam3: Sam3Client, key: int, before: int) -> bool:
    """The frame stamped ``key`` was answered, or the node counted more than ``before`` received."""
    recent = sam3.diagnostics[-3:]
    return key in sam3.detections or any(int(d.get("frames_received", -1)) > before for d in recent)


def _scores(detections: Detection2DArray) -> list[float]:
    return [d.results[0].hypothesis.score for d in detections.detections]


def _check_fields(sam3: Sam3Client, frame: Image) -> tuple[list[float], np.ndarray]:
    """One frame's answer: the fields a user reads, checked; returns its scores and label image."""
    detections, mask = _ask(sam3, frame)
    assert detections.header == frame.header and mask.header == frame.header  # stamp and frame_id
    assert (mask.encoding, mask.height, mask.width) == ("mono8", frame.height, frame.width)
    # threshold 0: every kept query is published (the host prompt path's scores over zero maps are > 0)
    assert [d.id for d in detections.detections] == [str(k) for k in range(1, MAX_INSTANCES + 1)]
    scores = _scores(detections)
    assert scores == sorted(scores, reverse=True) and all(0.0 < s < 1.0 for s in scores), scores
    assert [sam3.prompt_of(d) for d in detections.detections] == PROMPTS * MAX_INSTANCES
    labels = mask_pixels(mask)
    assert set(np.unique(labels).tolist()) <= set(range(MAX_INSTANCES + 1))  # pixel k: detection k
    return scores, labels


def test_the_launch_files_engine_ttnn_arguments_reach_the_node(sam3: Sam3Client) -> None:
    """``ros2 launch`` itself cannot run here (no launch_ros); what the launch file makes of the
    arguments can: its overrides (strings kept strings: device '0' is a chip id, not an int the
    node would refuse) and the params file, both in force in the node."""
    overrides, remapped = launch_file().node_configuration(_launch_configurations())
    assert overrides == {
        "engine": "ttnn",
        "device": "0",
        "model_id": "tiny-random",
        "prompts": PROMPTS,
        "threshold": 0.0,
    }
    assert remapped == [("image", "image"), ("image/compressed", "image/compressed")]
    for name, value in {**overrides, **PARAMS_FILE_CHANGES}.items():
        assert sam3.get_parameter(name) == value, name
    assert "configuring: engine=ttnn, tracker=association, model_id=tiny-random, device=0" in _log(sam3)
    assert "engine ttnn chosen: requested explicitly" in _log(sam3)


def _launch_configurations() -> dict[str, str]:
    """The launch configurations of this module's node but its params file (the overrides do not
    depend on it: the launch file reads cameras from it only)."""
    return launch_arguments(**LAUNCH_ARGUMENTS)


def test_frames_in_detections_masks_and_diagnostics_out_on_the_mock_chip(
    sam3: Sam3Client, torch_segmenter
) -> None:
    log = _log(sam3)
    assert "Blackhole chip 0 open: worker dispatch, 11x10 compute grid, 2 command queues" in log, log_tail(
        sam3.log_path
    )
    assert f"mock Blackhole cluster {sam3.descriptor}: no trace" in log
    status = sam3.next_diagnostics()
    assert (status["state"], status["_level"], status["engine"]) == ("active", 0, "ttnn"), status
    # The chip as the real library opened it: harvest mask 3 leaves 11x10, worker dispatch (the
    # build's Ethernet-dispatch descriptor lists more cores than a p150a has), two queues.
    assert status["device"] == (
        f"Blackhole p150a 0 (mock: {sam3.descriptor}, no trace), 11x10 compute grid, "
        "worker dispatch, 2 command queues"
    ), status
    # Every warm-up check ran on the mock chip, read zeros back and fell back, saying why.
    assert status["input"].startswith("bfloat16 upload (warm-up check: the chip's uint8 cast "), status
    for stage in CHECKED_STAGES:
        assert "(warm-up check: " in status[stage] and "check passed" not in status[stage], (stage, status)
    assert status["topk"].startswith("host top-k"), status
    assert status["prompt_path"].startswith(
        "host (auto: the chip prompt path failed its warm-up check: mask logits PCC nan < 0.99"
    ), status
    assert "prompt path on cpu" in status["dtype"], status

    pictures = [scene(1), scene(2), scene(3, width=80, height=120)]
    frames = [make_image(pictures[0]), make_image(pictures[1]), make_image(pictures[2], "bgr8")]
    answers = [_check_fields(sam3, frame) for frame in frames]
    # The chip's maps are zeros whatever the frame: every frame gets the same answer.
    assert answers[0][0] == answers[1][0] == answers[2][0], [a[0] for a in answers]
    assert np.array_equal(answers[0][1], answers[1][1])
    assert (answers[0][1] > 0).any(), "the same mask, and not an empty one"
    # The control: the torch engine sees the image and answers two frames differently.
    torch_scores = [
        [i.score for i in torch_segmenter(p, PROMPTS, threshold=0.0, max_instances=MAX_INSTANCES).instances]
        for p in pictures[:2]
    ]
    assert torch_scores[0] != torch_scores[1], torch_scores
    status = sam3.next_diagnostics()
    assert int(status["frames_processed"]) >= len(frames) and status["engine_errors"] == "0", status
    assert sam3.process.poll() is None, log_tail(sam3.log_path)


def _released(sam3: Sam3Client) -> int:
    return _log(sam3).count("engine released: engine=ttnn, device=Blackhole p150a 0 (mock: ")


def _state_diagnostics(sam3: Sam3Client, state: str) -> dict[str, str]:
    """The node's next segmentation status in lifecycle state ``state``."""

    def in_state(status: dict[str, str]) -> bool:
        return status["_name"].endswith(": segmentation") and status["state"] == state

    return sam3.next_diagnostics(where=in_state)


def test_cleanup_releases_the_chip_configure_opens_it_again_and_sigint_exits_0(sam3: Sam3Client) -> None:
    """Last of the module: deactivate keeps the engine (docs/node.md, Lifecycle), cleanup releases
    it (the log line the node writes once the engine's close, ttnn.close_device included, has
    returned), configure opens the chip again and serves, SIGINT's shutdown releases it and exits 0."""
    opened = "Blackhole chip 0 open: worker dispatch, 11x10 compute grid"
    assert sam3.transition(Transition.TRANSITION_DEACTIVATE) and sam3.state() == "inactive"
    inactive = _state_diagnostics(sam3, "inactive")
    assert inactive["device"].startswith("Blackhole p150a 0 (mock: "), inactive  # still held
    assert _released(sam3) == 0, log_tail(sam3.log_path)

    assert sam3.transition(Transition.TRANSITION_CLEANUP) and sam3.state() == "unconfigured"
    assert spin_until(sam3.probe, lambda: _released(sam3) == 1, WAIT_LIMIT_S), log_tail(sam3.log_path)
    unconfigured = _state_diagnostics(sam3, "unconfigured")
    # nothing held: the device is the parameter's, no chip described, no prompt path
    assert "Blackhole" not in unconfigured["device"] and "prompt_path" not in unconfigured, unconfigured
    assert _log(sam3).count(opened) == 1

    assert sam3.transition(Transition.TRANSITION_CONFIGURE), log_tail(sam3.log_path)
    assert _log(sam3).count(opened) == 2, log_tail(sam3.log_path)
    assert sam3.transition(Transition.TRANSITION_ACTIVATE) and sam3.state() == "active"
    sam3.wait_for_subscriber(process=sam3.process)
    scores, _ = _check_fields(sam3, make_image(scene(4)))
    assert _state_diagnostics(sam3, "active")["device"].startswith("Blackhole p150a 0 (mock: ")

    assert stop_node(sam3.process) == 0, log_tail(sam3.log_path)
    log = _log(sam3)
    assert _released(sam3) == 2, log_tail(sam3.log_path)
    assert log.rindex("releasing the engine") < log.rindex("engine released: engine=ttnn")
    failures = [mark for mark in FAILURE_MARKS if mark in log]
    assert not failures, (failures, log_tail(sam3.log_path))
    assert len(scores) == MAX_INSTANCES
