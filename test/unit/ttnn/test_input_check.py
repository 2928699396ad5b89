"""Warm-up's check of the uint8 upload: the chip casts one uploaded uint8 frame to bfloat16 and
the engine compares it with the host's values (exact: 0..255 fit bfloat16). A cast that is wrong
or raises makes frames go up as bfloat16 from the host, with the reason in describe()'s input
(on /diagnostics), and the image path's answers do not change. Forced here through the emulator:
its uint8 cast made wrong, then made to raise."""

from __future__ import annotations

import numpy as np
import pytest
from frames import random_frame


def frame() -> np.ndarray:
    return random_frame(7, (1008, 1008))


def maps(engine) -> list[np.ndarray]:
    return [m.numpy() for m in engine.encode_vision(frame()).fpn_hidden_states]


@pytest.fixture(scope="module")
def reference(emulator, tiny_model, tokenizer):
    """The uint8 path's maps (check passed), traced."""
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    emulator.reset()
    with TtnnEngine(tiny_model, tokenizer, ttnn_module=emulator) as engine:
        engine.warmup()
        assert engine.describe()["input"] == "uint8 upload, cast on the chip (warm-up check passed: exact)"
        return maps(engine)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("failure", ["wrong", "raises"])
def test_a_failed_uint8_cast_falls_back_to_a_bfloat16_upload(
    failure, emulator, tiny_model, tokenizer, reference, monkeypatch, caplog
):
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    real = emulator.typecast

    def typecast(tensor, dtype, **kwargs):
        if tensor.dtype == emulator.uint8:
            if failure == "raises":
                raise RuntimeError("TT_FATAL: unsupported unpack format UInt8")
            return emulator.mul(real(tensor, dtype, **kwargs), 0.5)
        return real(tensor, dtype, **kwargs)

    emulator.reset()
    monkeypatch.setattr(emulator, "typecast", typecast)
    with TtnnEngine(tiny_model, tokenizer, ttnn_module=emulator) as engine:
        engine.warmup()
        status = engine.describe()["input"]
        assert status.startswith("bfloat16 upload (warm-up check: the chip's uint8 cast ")
        if failure == "raises":
            assert "raised RuntimeError: 'TT_FATAL: unsupported unpack format UInt8'" in status
        else:
            assert "values wrong after the cast" in status
        assert "bfloat16 upload" in caplog.text
        for got, expected in zip(maps(engine), reference, strict=True):
            np.testing.assert_array_equal(got, expected)
