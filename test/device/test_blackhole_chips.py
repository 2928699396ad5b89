"""Several p150a chips in one process, as the node's ``devices`` opens them (a host with two or more).

Run (see docs/device_validation.md): part of ``pytest -m device test/device``; skipped with one chip.
The chips are opened together (``BlackholeChips``: one ttnn.CreateDevices call), one engine per
chip on the tiny model (the image path's programs and traces, seconds to build), each engine
warmed up and run on a thread of its own, as the node's chips run. Gates: every chip's FPN maps
equal chip 0's for the same frame (PCC >= 0.9999: same weights, same programs); the last chip's
engine closed (a chip taken out of service), chip 0 replays the frame again to the same maps bit
for bit. Off-chip, the real library on a mock of unlinked p150 boards shows chips opened one call
each tied together (closing one crashes the chips opened before it: test_mock_chips.py); on
chips, this is the check that opening them together lets one close alone.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from compare import pcc
from frames import random_frame

pytestmark = pytest.mark.device

CHIP_PCC_GATE = 0.9999


@pytest.fixture(scope="module")
def chip_ids(blackhole) -> list[int]:
    count = int(blackhole.GetNumAvailableDevices())
    if count < 2:
        pytest.skip(f"one process serving several chips needs two or more; ttnn sees {count}")
    return list(range(count))


def _maps(engine, image: np.ndarray) -> list[np.ndarray]:
    return [level.float().numpy() for level in engine.encode_vision(image).fpn_hidden_states]


def test_chips_opened_together_serve_the_same_maps_and_close_one_at_a_time(blackhole, chip_ids):
    from tt_sam3_ros.engines.ttnn_engine import BlackholeChips, TtnnEngine
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3, clip_tokenizer

    model, tokenizer = build_tiny_sam3(seed=0), clip_tokenizer()
    chips = BlackholeChips(chip_ids, ttnn_module=blackhole)
    engines = {
        chip: TtnnEngine(model, tokenizer, chip, ttnn_module=blackhole, chips=chips) for chip in chip_ids
    }
    side = engines[chip_ids[0]].config.image_side
    image = random_frame(7, (side, side))
    maps: dict[int, list[np.ndarray]] = {}
    errors: dict[int, BaseException] = {}

    def serve(chip: int) -> None:
        try:
            engines[chip].warmup_image_path()
            maps[chip] = _maps(engines[chip], image)
        except BaseException as error:  # reported by the test below
            errors[chip] = error

    try:
        for engine in engines.values():
            print(engine.describe()["device"])
        threads = [threading.Thread(target=serve, args=(chip,)) for chip in chip_ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        for chip in chip_ids[1:]:
            values = [pcc(maps[0][level], maps[chip][level]) for level in range(len(maps[0]))]
            print(f"chip {chip} against chip 0, PCC per FPN map: {values}")
            assert min(values) >= CHIP_PCC_GATE
        last = chip_ids[-1]
        engines.pop(last).close()  # a chip taken out of service
        again = _maps(engines[0], image)
        assert all(np.array_equal(before, after) for before, after in zip(maps[0], again, strict=True))
    finally:
        for engine in engines.values():
            engine.close()
