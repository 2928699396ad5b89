"""The warm-up checks' fallback forms run by the real ttnn 0.81.1 library on a MOCK p150a (no card).

tools/ttnn_mock/fallback_forms.py runs as a subprocess of the interpreter with the wheel; this side writes its
manifest (the sizes) and checks the report: every form the engine falls back to when a stage
fails its warm-up check (the convs' taps form at every neck level and both pixel-decoder stages,
the composite GroupNorm, ttnn.topk on the padded row, host top-k's stand-in rows) is accepted by
the real library's validation, program factories and allocator, at both sizes, for 1 and 4
prompts; and a taps weight of the wrong height is refused (so the check can fail). The numbers
of each form are the emulator's to check (test_stage_checks.py).
"""

from __future__ import annotations

import json
import sys

import pytest
from ttnn_env import MOCK_TOOLS, REPO, run_mock_tool

RUNNER = MOCK_TOOLS / "fallback_forms.py"
sys.path.insert(0, str(REPO / "tools"))
from ttnn_mock import fallback_forms  # noqa: E402 - tools/ is not a package root

#: The real ttnn wheel runs these (the ubuntu24.04 row; other rows deselect them).
pytestmark = pytest.mark.ttnn_wheel


@pytest.mark.parametrize("size", fallback_forms.SIZES)
def test_real_library_accepts_every_fallback_form(tmp_path, size):
    manifest_path = fallback_forms.write_manifest(size, tmp_path / "manifest.json")
    manifest = json.loads(manifest_path.read_text())
    done, report = run_mock_tool(
        "mock p150a", RUNNER, tmp_path / "report.json", str(manifest_path), "--batch", "4"
    )
    assert done.returncode == 0 and report["ok"], f"{report}\n{done.stderr[-2000:]}"
    assert report["grid"] == [11, 10]
    forms = report["forms"]
    pixel = manifest["pixel_decoder"]
    channels = pixel["channels"]
    sides = [pixel["side"] * 2 ** (stage + 1) for stage in range(pixel["stages"])]
    for side in manifest["neck_sides"]:
        assert forms[f"conv_taps.neck.{side}"]["shape"] == [1, 1, side * side, manifest["fpn_dim"]]
    for batch in (1, 4):
        for side in sides:
            assert forms[f"conv_taps.pixel_decoder.{side}.b{batch}"]["shape"] == [
                1,
                1,
                batch * side * side,
                channels,
            ]
            assert forms[f"group_norm_composite.{side}.b{batch}"]["shape"] == [
                batch,
                1,
                side * side,
                channels,
            ]
        selection = [batch, manifest["kept"], manifest["rows"]]
        assert forms[f"padded_topk.b{batch}"]["shape"] == selection
        assert forms[f"host_topk_rows.b{batch}"]["shape"] == selection
    assert report["padded_topk_indices_dtype"] == "DataType.UINT16"
    assert "TT_FATAL" in report["refused"] and "a_shape[-1] == b_shape[-2]" in report["refused"]
