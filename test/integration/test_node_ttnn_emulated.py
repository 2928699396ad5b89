"""The /sam3 node with engine:=ttnn in its own process, over real rclpy, the chip emulated.

The node imports ttnn as it would on a Blackhole host; test/support/emulated_ttnn answers that
import with the TT-NN emulator (its trace rules and L1 budget included), so this runs the whole
ttnn engine inside the node: open, weight upload, warm-up with trace capture, one replay per
frame, release at shutdown. The answers must be the torch engine's within the chip's numerics.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers.sam3_client import Sam3Client, log_tail, make_image, running_node, scene

SUPPORT = Path(__file__).resolve().parents[1] / "support"
PROMPTS = ["car", "person"]
MAX_INSTANCES = 6
NODE_PARAMS = {
    "model_id": "tiny-random",
    "engine": "ttnn",
    "prompts": str(PROMPTS),
    "threshold": "0.0",
    "max_instances": str(MAX_INSTANCES),
    "max_image_side": "256",
    "tracking": "false",
}


@pytest.fixture(scope="module")
def sam3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sam3Client]:
    log_path = tmp_path_factory.mktemp("sam3_ttnn") / "node.log"
    path = os.pathsep.join([str(SUPPORT / "emulated_ttnn"), str(SUPPORT), os.environ.get("PYTHONPATH", "")])
    with running_node(NODE_PARAMS, log_path, env={"PYTHONPATH": path}) as client:
        yield client


def test_the_node_answers_frames_on_the_emulated_chip_like_the_torch_engine(sam3: Sam3Client) -> None:
    from tt_sam3_ros.segmenter import Sam3Segmenter

    log = sam3.log_path.read_text(errors="replace")
    assert "Blackhole chip 0 open: worker dispatch, 11x10 compute grid" in log, log_tail(sam3.log_path)
    status = sam3.next_diagnostics(timeout_s=10.0)
    assert status["engine"] == "ttnn" and "(emulated)" in status["device"], status
    with Sam3Segmenter.from_pretrained(model_id="tiny-random", engine="torch", device="cpu") as host:
        for seed in (1, 2):
            picture = scene(seed=seed)
            detections, mask = sam3.ask(make_image(picture, "rgb8"))
            want = host(picture, PROMPTS, threshold=0.0, max_instances=MAX_INSTANCES)
            assert (mask.height, mask.width) == picture.shape[:2]
            assert len(detections.detections) == len(want.instances) == MAX_INSTANCES
            got = sorted(d.results[0].hypothesis.score for d in detections.detections)
            assert np.allclose(got, sorted(i.score for i in want.instances), atol=0.02), (got, want)
    assert "image trace captured on the first frame" not in sam3.log_path.read_text(errors="replace")
