"""Price the prompt path's modules per prompt count: what a padded batch costs against a smaller one.

Runs tools/ttnn_mock/prompt_layers.py's modules (one fusion-encoder layer, one decoder layer, the
scoring and the segmentation head's pieces; the geometry encoder's class token is per image) on
a mock p150a with the real ttnn 0.81.1 library for each prompt count, records every call with
the op recorder (oplog.py) and prices the log with benchmarks/blackhole/trace_cost.py's roofline. Nothing
computes on the mock: the figures are the cost model's, not a chip's; they decide how prompt
counts are bucketed (ttnn_model/prompt_buffers.py).

Two halves, as prompt_layers.py has: the manifest is written where torch is,
    .venv/bin/python -c "import sys; sys.path[:0] = ['.', 'tools']; from ttnn_mock import prompt_layers; \
prompt_layers.write_manifest('full', __import__('pathlib').Path('/tmp/prompt_full.json'))"
then, in .venv-ttnn:
    .venv-ttnn/bin/python tools/ttnn_mock/prompt_batch_cost.py /tmp/prompt_full.json --batches 1 2 4 8 16
It prints one row per module and the per-replay sum for SAM 3's 6 encoder and 6 decoder layers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tools")]

from benchmarks.blackhole import trace_cost  # noqa: E402 - after the path set-up above
from ttnn_mock import oplog, prompt_layers, toolchain  # noqa: E402

#: Layers SAM 3 stacks (transformers' Sam3Config: 6 fusion-encoder and 6 decoder layers).
STACKED = {"fusion_encoder_layer": 6, "decoder_layer": 6}


def _module_of_caller() -> str:
    """The outermost ttnn_model function on the stack: the prompt module an op belongs to."""
    frame, found = sys._getframe(2), "other"
    while frame is not None:
        if "ttnn_model/" in frame.f_code.co_filename.replace("\\", "/"):
            found = frame.f_code.co_name
        frame = frame.f_back
    return found


def price_batch(manifest: dict[str, Any], batch: int) -> dict[str, float]:
    """Modelled seconds per module for `batch` prompts (one eager run of each on the mock)."""
    import ttnn

    modules: list[str] = []
    recorder = oplog.Recorder(ttnn, before_op=lambda *_: modules.append(_module_of_caller()))
    report: dict[str, Any] = {"modules": {}}
    sys.modules["ttnn"] = recorder  # prompt_layers.run imports ttnn: it gets the recorder
    try:
        prompt_layers.run(manifest, report, batch, modules_only=True)
    finally:
        sys.modules["ttnn"] = ttnn
    failed = {name: v["error"] for name, v in report["modules"].items() if not v["ok"]}
    if failed:
        raise RuntimeError(f"the mock refused modules at batch {batch}: {failed}")
    totals: dict[str, float] = defaultdict(float)
    for module, cost in zip(modules, trace_cost.price_all(r.to_json() for r in recorder.log), strict=True):
        totals[module] += cost.seconds
    return dict(totals)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--harvest", type=int, default=toolchain.HARVEST_MASKS["harvested"])
    args = parser.parse_args(argv)
    manifest = json.loads(args.manifest.resolve().read_text())
    with tempfile.TemporaryDirectory(prefix="ttnn-mock-cost-") as scratch:
        os.environ.update(toolchain.build(Path(scratch), args.harvest))
        os.chdir(scratch)  # tt-metal writes generated/ into the cwd
        priced = {batch: price_batch(manifest, batch) for batch in args.batches}
    names = sorted({name for totals in priced.values() for name in totals})
    print(
        f"roofline ms per module ({manifest['size']} size, mock p150a harvest mask {args.harvest}, "
        f"{trace_cost.PEAK_CORES}-core peaks; trace_cost.py's model)"
    )
    print(f"{'module':28s}" + "".join(f"{f'B={b}':>10s}" for b in args.batches))
    for name in names:
        print(f"{name:28s}" + "".join(f"{priced[b].get(name, 0.0) * 1e3:10.3f}" for b in args.batches))
    replay = {
        b: sum(seconds * STACKED.get(name, 1) for name, seconds in totals.items() if name != "class_token")
        for b, totals in priced.items()
    }
    print(f"{'prompt replay (6+6 layers)':28s}" + "".join(f"{replay[b] * 1e3:10.3f}" for b in args.batches))
    print(f"{'  per prompt':28s}" + "".join(f"{replay[b] * 1e3 / b:10.3f}" for b in args.batches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
