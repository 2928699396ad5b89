"""Host work per frame for the ttnn engine: the uint8 input path beside the path it replaced.

The engine's path (TtnnEngine._host_input): the model's resize to uint8 (preprocess.resize_to_model),
a view of those bytes as (1, 1008, 3024), and the wheel's host conversion to a uint8 ROW_MAJOR
tensor, which copy_host_to_device_tensor writes into the trace's persistent input buffer; the
cast, the patching into window order, the tilize and the normalisation (folded into the patch
embedding) run on the chip, inside the trace. The replaced path, measured as the reference:
resize and normalise to float32 (preprocess.normalise), patchify into window order with torch
(the engine's former host step, reproduced here), then the wheel's conversion of the
(1, 1, 5184, 588) patches to bfloat16 ROW_MAJOR (its TILE conversion in brackets). Conversions
are timed with the real ttnn wheel in .venv-ttnn (CPython 3.12, no torch: it gets numpy arrays,
the same bytes); the resize, normalise and patchify run here. Upload staging is the host tensor
the wheel builds; the copy itself is the driver's and needs a chip. Each figure is the median of
several calls after a warm-up call. Printed by `python -m benchmarks --only blackhole`
(blackhole_bench calls print_host_table) or `python -m benchmarks.blackhole.blackhole_host`.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..common import report

REPO = Path(__file__).resolve().parents[2]
#: The interpreter with the real ttnn wheel: this one where it imports ttnn (the ubuntu24.04 row),
#: else a .venv-ttnn made by hand.
TTNN_PYTHON = (
    Path(sys.executable) if importlib.util.find_spec("ttnn") else REPO / ".venv-ttnn" / "bin" / "python"
)
#: The goal for host work per frame on the ttnn engine: a 1080p frame.
BUDGET_MS = 5.0
SOURCE = (1080, 1920)

#: Runs in .venv-ttnn: times the wheel's host conversions of both paths' inputs (same shapes and dtypes).
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


def _patchify_reference(pixels: np.ndarray, config: Any) -> Any:
    """The replaced path's host patchify: float32 (1, 3, S, S) -> (1, 1, tokens, 3*p*p) in window
    order, one torch permute (kept here only as the benchmark's reference)."""
    import torch

    n, w, p = config.windows_per_side, config.window, config.patch
    cells = torch.from_numpy(pixels)[0].reshape(3, n, w, p, n, w, p)  # (c, wy, ty, ky, wx, tx, kx)
    ordered = cells.permute(1, 4, 2, 5, 0, 3, 6)  # (wy, wx, ty, tx, c, ky, kx)
    return ordered.reshape(1, 1, config.tokens, config.patch_features)


def _fastest(run: Any, repeats: int) -> float:
    """The fastest of `repeats` calls after a warm-up (seconds): the cost with the cores to itself,
    which the median hides when other processes share the cores."""
    run()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return min(samples)


def host_times(repeats: int) -> dict[str, float]:
    """Each path's host stages here, on one 1080p frame (seconds, medians)."""
    import torch

    from tt_sam3_ros.core import preprocess
    from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig

    config = ImagePathConfig(
        1008, 14, 72, 24, 1024, 16, 64, 64, 4096, 32, (7, 15, 23, 31), 1e-6, 256, (4, 2, 1, 0.5)
    )
    rgb = np.random.default_rng(1).integers(0, 256, (*SOURCE, 3), dtype=np.uint8)
    image = preprocess.resize_to_model(rgb)
    pixels = preprocess.normalise(image)
    return {
        "resize_normalise": report.median_time(
            lambda: preprocess.normalise(preprocess.resize_to_model(rgb)), repeats
        ),
        "patchify": report.median_time(lambda: _patchify_reference(pixels, config), repeats),
        "resize_uint8": report.median_time(lambda: preprocess.resize_to_model(rgb), repeats),
        "resize_uint8_fastest": _fastest(lambda: preprocess.resize_to_model(rgb), repeats),
        "view": report.median_time(lambda: torch.from_numpy(image).reshape(config.input_shape), repeats),
    }


def print_host_table(quick: bool = False) -> None:
    """The host table: the engine's uint8 path beside the replaced one, stage by stage, with the
    ratio and the 5 ms goal."""
    repeats = 3 if quick else 9
    report.title(f"ttnn engine: host work per frame, {SOURCE[1]}x{SOURCE[0]} RGB input")
    for line in report.machine_lines():
        print(line)
    report.progress("host work: resize, normalise, patchify")
    here = host_times(repeats)
    report.progress("host work: the wheel's conversions")
    wheel = wheel_conversions(repeats)
    if wheel is None:
        print("wheel conversions not run: no ttnn in this environment (the ubuntu24.04 row has it)")
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
    replaced = here["resize_normalise"] + here["patchify"] + (rows_bf16 or 0.0)
    engine = here["resize_uint8"] + here["view"] + (raw or 0.0)
    rows = [
        ["resize", f"{report.ms(here['resize_normalise'])} (and normalise)", report.ms(here["resize_uint8"])],
        [
            "reorder on the host",
            f"{report.ms(here['patchify'])} (patchify into window order)",
            f"{report.ms(here['view'])} (a view as (1, 1008, 3024); patchify in the trace)",
        ],
        [
            "wheel host conversion (upload staging)",
            f"{rows_text} bf16 ROW_MAJOR (TILE: {tile_text})",
            f"{raw_text} uint8 ROW_MAJOR",
        ],
        ["total host work per frame", report.ms(replaced), report.ms(engine)],
        ["goal", f"{BUDGET_MS:.0f}", f"{BUDGET_MS:.0f}"],
    ]
    report.table(["stage", "replaced path (ms)", "engine's uint8 path (ms)"], rows)
    complete = raw is not None and rows_bf16 is not None
    verdict = "within" if engine <= BUDGET_MS / 1000 else "over"
    print(
        f"the uint8 path's host work is {replaced / engine:.1f}x less than the replaced path's"
        + (f", {verdict} the {BUDGET_MS:.0f} ms goal" if complete else " (wheel conversions not run)")
        + "; on the chip it adds a typecast, two reshape copies, a permute and a tilize before the "
        "patch embedding (tools/ttnn_mock checks them)"
    )
    if complete:
        quiet = here["resize_uint8_fastest"] + here["view"] + raw
        print(
            f"with the cores to itself (the fastest of the {repeats} resize calls, "
            f"{report.ms(here['resize_uint8_fastest'])} ms): {report.ms(quiet)} ms per frame; the "
            "medians above include the waits for the other processes on these cores (load average above)"
        )


if __name__ == "__main__":
    print_host_table(quick="--quick" in sys.argv)
