"""The tiny model on Tenstorrent's full-system simulator (ttsim), before any chip.

Run (see docs/device_validation.md, "Before the chip: the simulator"):
    TT_METAL_SIMULATOR=~/sim/libttsim_bh.so pytest -m device test/device/test_blackhole_simulator.py -v -s \\
        --device-report simulator_report.json
The engine opens the simulated chip itself (slow dispatch, one command queue, no trace). For
each prompt path (the host's, and auto: the chip's when its check passes), warm-up checks every
risky stage against the host on the simulator's real kernels and falls back where one fails; the
test prints every verdict and puts them in the report with the fallbacks taken. Gate: whatever
serves, the query logits and the best query's mask logits of one frame at PCC >= 0.99 against
the torch engine on the CPU (float32, same weights). The prompt modules are drawn at unit gain,
so a wrong stage shows.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from compare import pcc
from frames import random_frame
from random_weights import randomise_prompt_path

pytestmark = pytest.mark.device

PCC_GATE = 0.99
PROMPTS = ["car"]
#: The stages warm-up checks per prompt path (the chip prompt path's only with "auto").
CHECKED = {
    "host": ["input", "neck_convs"],
    "auto": ["input", "neck_convs", "topk", "group_norm", "pixel_decoder_convs", "prompt_path"],
}


@pytest.fixture(scope="module")
def model(simulator):
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3

    tiny = build_tiny_sam3()
    randomise_prompt_path(tiny)
    return tiny


@pytest.fixture(scope="module")
def tokenizer(simulator):
    from tt_sam3_ros.weights.tiny_model import clip_tokenizer

    return clip_tokenizer()


def decoded(engine, frame: np.ndarray) -> dict[str, np.ndarray]:
    batch = engine.decode(engine.encode_image(frame), engine.encode_prompts(PROMPTS))
    best = np.array([int(np.argmax(batch.logits[0]))])
    return {"logits": batch.logits, "best": best, "mask": engine.fetch_masks(batch, np.array([0]), best)}


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    return random_frame(5, (1008, 1008))


@pytest.fixture(scope="module")
def reference(model, tokenizer, frame):
    from tt_sam3_ros.engines.torch_engine import TorchEngine

    engine = TorchEngine(copy.deepcopy(model), tokenizer, device="cpu", dtype="float32")
    try:
        return decoded(engine, frame)
    finally:
        engine.close()


@pytest.mark.parametrize("prompt_path", sorted(CHECKED))
def test_the_tiny_model_on_the_simulator_matches_the_torch_engine(
    simulator, model, tokenizer, frame, reference, prompt_path, device_report, gate
):
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    with TtnnEngine(
        model, tokenizer, ttnn_module=simulator, prompt_path=prompt_path, max_prompts=1
    ) as engine:
        assert engine.simulator is not None and not engine.image_encoder.use_trace
        engine.warmup()
        device_report.engine(f"tiny model, prompt path {prompt_path}", engine)
        for check in engine.stage_checks.values():
            print(f"{prompt_path} prompt path, warm-up check {check.stage}: {check.reason}")
        assert list(engine.stage_checks) == CHECKED[prompt_path]
        got = decoded(engine, frame)
    logits = pcc(got["logits"], reference["logits"])
    same = bool(got["best"][0] == reference["best"][0])
    print(f"{prompt_path} prompt path: query logits PCC {logits:.5f}; same best query {same}")
    assert gate(f"{prompt_path} prompt path: query logits PCC", logits, ">=", PCC_GATE)
    if same:
        mask = pcc(got["mask"], reference["mask"])
        print(f"{prompt_path} prompt path: best query's mask logits PCC {mask:.5f}")
        assert gate(f"{prompt_path} prompt path: best mask logits PCC", mask, ">=", PCC_GATE)
