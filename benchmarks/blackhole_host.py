"""Host work per frame for the ttnn engine: today's input path beside a uint8 upload.

Today (TtnnEngine._host_input): resize + normalise to float32 (preprocess.to_model_input), patchify
into window order (torch), then the wheel's host conversion of the (1, 1, 5184, 588) patches to a
bfloat16 ROW_MAJOR tensor, which copy_host_to_device_tensor uploads and the trace tilizes (the
host TILE conversion it replaced is printed beside it). The budget path: resize to
uint8 only, and hand the wheel a uint8 ROW_MAJOR tensor (1, 1008, 3024): normalisation folds into
the patch embedding (exact: (x / 255 - 0.5) / 0.5 is linear) and patchify/tilize move into the
trace. Conversions are timed with the real ttnn wheel in .venv-ttnn (CPython 3.12, no torch: it
gets numpy arrays, the same bytes); the resize and patchify run here. Each figure is the median
of several calls after a warm-up call. Printed by `python -m benchmarks --only blackhole`
(blackhole_bench calls print_host_table).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from . import report

REPO = Path(__file__).resolve().parents[1]
TTNN_PYTHON = REPO / ".venv-ttnn" / "bin" / "python"
#: The goal for host work per frame on the ttnn engine (issue 11): a 1080p frame.
BUDGET_MS = 5.0
SOURCE = (1080, 1920)

#: Runs in .venv-ttnn: times the wheel's host conversions of today's and the budget path's input.
_CONVERSIONS = r"""
import json, os, sys, tempfile, time
sys.path.insert(0, "tools")
import numpy as np
import ttnn_conformance
folder = tempfile.mkdtemp()
descriptor = os.path.join(folder, "p150.yaml")
open(descriptor, "w").write(ttnn_conformance.MOCK_P150)
os.environ["TT_METAL_MOCK_CLUSTER_DESC_PATH"] = descriptor
import ttnn
repeats = int(sys.argv[1])
def median(run):
    first = time.perf_counter(); run(); first = time.perf_counter() - first
    times = []
    for _ in range(repeats):
        start = time.perf_counter(); run(); times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2], first
rng = np.random.default_rng(0)
patches = rng.random((1, 1, 5184, 588), dtype=np.float32)
image = rng.integers(0, 256, (1, 1008, 3024), dtype=np.uint8)
out = {
    "version": __import__("importlib.metadata").metadata.version("ttnn"),
    "tile_bf16": median(lambda: ttnn.Tensor(patches, ttnn.bfloat16, None, ttnn.TILE_LAYOUT)),
    "row_major_bf16": median(lambda: ttnn.Tensor(patches, ttnn.bfloat16, None, ttnn.ROW_MAJOR_LAYOUT)),
    "row_major_uint8": median(lambda: ttnn.Tensor(image, ttnn.uint8, None, ttnn.ROW_MAJOR_LAYOUT)),
}
print("RESULT " + json.dumps(out))
"""


def wheel_conversions(repeats: int) -> dict | None:
    """The wheel's host conversion times (median, first call) in seconds; None without .venv-ttnn."""
    if not TTNN_PYTHON.exists():
        return None
    done = subprocess.run(
        [str(TTNN_PYTHON), "-c", _CONVERSIONS, str(repeats)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"the wheel's conversion timing failed: {done.stderr[-2000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def _resize_uint8(rgb: np.ndarray) -> np.ndarray:
    """The model's resize (bilinear, antialiased, rounded to uint8), without the normalisation."""
    import torch
    from torchvision.transforms.v2 import functional as tvf

    from tt_sam3_ros.engines.base import MODEL_SIDE

    chw = torch.from_numpy(rgb).permute(2, 0, 1)
    resized = tvf.resize(
        chw, [MODEL_SIDE, MODEL_SIDE], interpolation=tvf.InterpolationMode.BILINEAR, antialias=True
    )
    return resized.permute(1, 2, 0).contiguous().numpy()


def host_times(repeats: int) -> dict[str, float]:
    """Resize, normalise and patchify as each path does them here (seconds, medians)."""
    import torch

    from tt_sam3_ros import preprocess
    from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig, patchify

    config = ImagePathConfig(
        1008, 14, 72, 24, 1024, 16, 64, 64, 4096, 32, (7, 15, 23, 31), 1e-6, 256, (4, 2, 1, 0.5)
    )
    rgb = np.random.default_rng(1).integers(0, 256, (*SOURCE, 3), dtype=np.uint8)
    pixels = preprocess.to_model_input(rgb)
    return {
        "resize_normalise": report.median_time(lambda: preprocess.to_model_input(rgb), repeats),
        "patchify": report.median_time(lambda: patchify(torch.from_numpy(pixels)[0], config), repeats),
        "resize_uint8": report.median_time(lambda: _resize_uint8(rgb), repeats),
    }


def print_host_table(quick: bool = False) -> None:
    """The host table: today's path and the uint8 path, stage by stage, beside the 5 ms goal."""
    repeats = 3 if quick else 9
    report.title(f"ttnn engine: host work per frame, {SOURCE[1]}x{SOURCE[0]} RGB input")
    for line in report.machine_lines():
        print(line)
    report.progress("host work: resize, normalise, patchify")
    here = host_times(repeats)
    report.progress("host work: the wheel's conversions (.venv-ttnn)")
    wheel = wheel_conversions(repeats)
    if wheel is None:
        print("wheel conversions not run: no .venv-ttnn (make ttnn-env makes it)")
        wheel = {}
    import torch

    print(
        f"settings: real ttnn {wheel.get('version', '?')} host conversions (.venv-ttnn, numpy input), "
        f"torch {torch.__version__} for resize and patchify ({torch.get_num_threads()} threads); "
        f"medians of {repeats} calls after one warm-up; conversion first calls in brackets"
    )

    def conversion(key: str) -> tuple[float | None, str]:
        if key not in wheel:
            return None, "not run"
        median, first = wheel[key]
        return median, f"{report.ms(median)} ({report.ms(first)} first)"

    _, tile_text = conversion("tile_bf16")
    rows_bf16, rows_text = conversion("row_major_bf16")
    raw, raw_text = conversion("row_major_uint8")
    today = here["resize_normalise"] + here["patchify"] + (rows_bf16 or 0.0)
    budget = here["resize_uint8"] + (raw or 0.0)
    rows = [
        ["resize", f"{report.ms(here['resize_normalise'])} (and normalise)", report.ms(here["resize_uint8"])],
        ["patchify into window order", report.ms(here["patchify"]), "on the chip, in the trace"],
        [
            "wheel host conversion",
            f"{rows_text} bf16 ROW_MAJOR (TILE: {tile_text})",
            f"{raw_text} uint8 ROW_MAJOR",
        ],
        ["total host work per frame", report.ms(today), report.ms(budget)],
        ["goal", f"{BUDGET_MS:.0f}", f"{BUDGET_MS:.0f}"],
    ]
    report.table(["stage", "today's path (ms)", "uint8 upload path (ms)"], rows)
    print(
        "The uint8 path's device side (uint8 input buffer in the trace, patchify and tilize on the chip, "
        "normalisation folded into the patch embedding) is not implemented yet: this table measures what "
        "its host side costs."
    )


if __name__ == "__main__":
    print_host_table(quick="--quick" in sys.argv)
