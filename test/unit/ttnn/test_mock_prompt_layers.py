"""The prompt path's TT-NN modules run by the real ttnn 0.81.1 library on a MOCK p150a (no card).

tools/ttnn_mock/prompt_layers.py runs as a subprocess of the interpreter with the wheel (a crash
inside tt-metal fails one test, not pytest); this side writes its manifest. The mock checks what
the real library checks on the host (validation, program factories, circular buffers, the
allocator), not numerics; the modules are not in the engine yet, so each is called once, eagerly,
as the engine will call it (the geometry encoder's class token once per image, the others for a
batch of prompts). Then the composed path as the engine runs it: ChipPromptPath.compile (its
_forward for buckets of 1 and 4 prompts, each followed by the kept rows' mask read and the
fallback's _mask_rows) on device buffers shaped like the image trace's outputs, and a class tile of
the wrong height, which the real library must refuse. Each bucket's forward and mask reads run once
more stage by stage under NO_DISPATCH graph captures: each stage's per-core peak is printed with
its headroom and must fit the L1 bank (at both sizes, on the harvested 11x10 and the 13x10 grid,
for 1 and 4 prompts)."""

from __future__ import annotations

import sys

import pytest
from ttnn_env import MOCK_TOOLS, REPO, run_mock_tool

RUNNER = MOCK_TOOLS / "prompt_layers.py"
sys.path.insert(0, str(REPO / "tools"))
from ttnn_mock import prompt_layers, toolchain  # noqa: E402 - tools/ is not a package root
from ttnn_mock.image_path import L1_BANK_BYTES  # noqa: E402

from tt_sam3_ros.engines.ttnn_model.prompt_path import KEPT_QUERIES  # noqa: E402

#: The real ttnn wheel runs these (the ubuntu24.04 row; other rows deselect them).
pytestmark = pytest.mark.ttnn_wheel

GRIDS = {"harvested": (toolchain.HARVEST_MASKS["harvested"], [11, 10]), "unharvested": (0, [13, 10])}
MODULES = {
    "geometry_class_token",
    "fusion_encoder_layer",
    "decoder_layer",
    "query_logits",
    "presence_logits",
    "detection_scores",
    "head_prompt_attention",
    "pixel_decoder",
    "mask_logits",
    "query_position",
    "box_bias",
    "decoder_stack",
    "kept_mask_logits",
}


@pytest.mark.parametrize(
    ("size", "grid", "batch"),
    [(size, grid, 1) for size in prompt_layers.SIZES for grid in sorted(GRIDS)] + [("full", "harvested", 4)],
)
def test_real_library_accepts_every_prompt_module(tmp_path, size, grid, batch):
    """Every module, one prompt on both grids at both sizes; 4 prompts in one batch at full size.
    The composed path compiles buckets 1 and 4 whatever the batch, so only the 1-prompt runs
    run it (the 4-prompt run would repeat the full-size harvested one)."""
    harvest, expected_grid = GRIDS[grid]
    manifest = prompt_layers.write_manifest(size, tmp_path / "manifest.json")
    done, report = run_mock_tool(
        "mock p150a",
        RUNNER,
        tmp_path / "report.json",
        str(manifest),
        "--harvest",
        str(harvest),
        "--batch",
        str(batch),
        *(["--no-composed"] if batch != 1 else []),
    )
    assert done.returncode == 0 and report["ok"], (report, done.stderr[-2000:])
    assert report["grid"] == expected_grid
    assert set(report["modules"]) == MODULES
    # the class token is once per image; every other module runs the batch of prompts
    assert report["modules"]["geometry_class_token"]["shape"] == [1, 32, 256 if size == "full" else 32]
    assert all(v["shape"][0] == batch for k, v in report["modules"].items() if k != "geometry_class_token")
    assert report["modules"]["pixel_decoder"]["shape"] == [batch, 288 * 288, report["pixel_channels"]]
    columns = report["group_norm_columns"]
    assert columns["ours"] == columns["library"], columns
    grids = report["group_norm_grids"]
    assert all(g["ours"] == g["library"] for g in grids.values()), grids
    kept = min(prompt_layers.MAX_INSTANCES, 200 if size == "full" else 20)
    assert report["modules"]["kept_mask_logits"]["shape"] == [batch, kept, 288 * 288]
    assert report["selection_shapes"] == {
        "k": kept,
        "values": [batch, 1, kept],
        "indices": [batch, 1, kept],
        "indices_dtype": "DataType.UINT16",
        "kept": [batch, 1, kept],
        "boxes": [batch, kept, 4],
    }
    print(
        f"{size}, {batch} prompt(s), on {grid} {report['grid']}: "
        + ", ".join(f"{k} {v['shape']}" for k, v in report["modules"].items())
    )
    peaks = report["peaks"]
    print(
        "  per-core peaks, L1 buffers / circular buffers / total (NO_DISPATCH): "
        + ", ".join(
            f"{k} {v.get('peak_l1')} / {v.get('peak_cb')} / {v.get('peak_total')} B" for k, v in peaks.items()
        )
    )
    assert all("error" not in v for v in peaks.values()), peaks
    assert all(v["peak_total"] < L1_BANK_BYTES for v in peaks.values()), peaks
    if batch == 1:
        _check_composed(report, size, grid)
    else:
        assert "composed" not in report


def _check_composed(report: dict, size: str, grid: str) -> None:
    """ChipPromptPath.compile ran on the real library: every bucket's outputs and mask read."""
    composed = report["composed"]
    assert composed["ok"], composed
    c, rows = (256, 224) if size == "full" else (32, 32)
    pixels, kept = 288 * 288, min(KEPT_QUERIES, 200 if size == "full" else 20)
    for bucket in prompt_layers.COMPOSED_BUCKETS:
        outputs = composed["shapes"][f"forward_{bucket}"]
        kept_logits, kept_presence, high, low, kept_rows, kept_embeddings, per_pixel = outputs[:7]
        logits, presence, boxes, embeddings = outputs[7:]
        assert kept_logits == kept_presence == [bucket, kept, 1] and kept_rows == [bucket, 1, kept]
        assert high[:2] == low[:2] == [bucket, kept] and kept_embeddings == [bucket, kept, c]
        assert logits == presence == [bucket, rows, 1]
        assert boxes[:2] == [bucket, rows] and embeddings == [bucket, rows, c]
        assert per_pixel == [bucket, pixels, report["pixel_channels"]]
        assert composed["shapes"][f"kept_mask_logits_{bucket}"] == [bucket, kept, pixels]
        assert composed["shapes"][f"mask_rows_{bucket}"] == [bucket, 32, pixels]
    # the check can fail: a (1, 64, C) class tile does not fit the placement matmul
    assert "a_shape[-1] == b_shape[-2]" in (report["refused"] or ""), report["refused"]
    _print_stage_peaks(report["stage_peaks"], size, grid, report["grid"])
    for bucket in prompt_layers.COMPOSED_BUCKETS:
        stages = report["stage_peaks"][str(bucket)]
        assert "error" not in stages, stages
        assert tuple(stages) == prompt_layers.PROMPT_STAGES, stages
        assert all(v["peak_total"] < L1_BANK_BYTES for v in stages.values()), stages


def _print_stage_peaks(peaks: dict, size: str, grid: str, cores: list[int]) -> None:
    """The composed path's per-core peaks, one row per stage and bucket, with the bank's headroom."""
    print(
        f"  composed prompt path ({size}, {grid} {cores[0]}x{cores[1]}): per-core peak bytes by stage "
        f"(NO_DISPATCH), headroom of the {L1_BANK_BYTES:,} B L1 bank"
    )
    columns = ("L1 buf", "CB", "dataflow", "total", "of bank", "headroom")
    print(f"    {'bucket':>6} {'stage':<18} " + " ".join(f"{c:>9}" for c in columns))
    for bucket, stages in peaks.items():
        if "error" in stages:
            print(f"    {bucket:>6} error: {stages['error']}")
            continue
        for stage, v in stages.items():
            total = v["peak_total"]
            print(
                f"    {bucket:>6} {stage:<18} {v['peak_l1']:>9,} {v['peak_cb']:>9,} "
                f"{v['peak_dataflow_buffer']:>9,} {total:>9,} {100 * total / L1_BANK_BYTES:>8.1f}% "
                f"{L1_BANK_BYTES - total:>9,}"
            )
