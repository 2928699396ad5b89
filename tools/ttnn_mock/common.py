"""What the manifest-driven mock runners (prompt_layers.py, fallback_forms.py) share: their
arguments and manifest, the engine's device modules imported without torch, the mock device
they run on, the mock's scratch folder around the run, and the JSON report's ending. Runs in
the suite's interpreter where it has ttnn (with real torch), else in .venv-ttnn (no torch).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import traceback
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ttnn_mock import toolchain


def parser(doc: str, batch_default: int, batch_help: str) -> argparse.ArgumentParser:
    """MANIFEST.json, --harvest, --batch and --json; a runner adds its own after."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--harvest", type=int, default=toolchain.HARVEST_MASKS["harvested"])
    parser.add_argument("--batch", type=int, default=batch_default, help=batch_help)
    parser.add_argument("--json", type=Path, required=True)
    return parser


def start(
    parser: argparse.ArgumentParser, argv: list[str] | None, entries: str
) -> tuple[argparse.Namespace, dict[str, Any], dict[str, Any]]:
    """(arguments, manifest, report): paths resolved before the run changes directory, the report
    with the manifest's size, the harvest mask, an empty `entries` dict and ok False."""
    args = parser.parse_args(argv)
    args.json = args.json.resolve()
    manifest = json.loads(args.manifest.resolve().read_text())
    report: dict[str, Any] = {
        "size": manifest["size"],
        "harvest_mask": args.harvest,
        entries: {},
        "ok": False,
    }
    return args, manifest, report


def import_modules() -> types.SimpleNamespace:
    """The device modules, imported with a stand-in torch where torch is not installed (.venv-ttnn:
    their host helpers are not called here); with the real torch where it is (the main environment)."""
    stand_in = types.ModuleType("torch")
    if importlib.util.find_spec("torch") is None:
        sys.modules.setdefault("torch", stand_in)
    try:
        from tt_sam3_ros.engines.ttnn_model import (
            attention,
            config,
            decoder,
            fusion_encoder,
            geometry_encoder,
            prompt_buffers,
            prompt_config,
            prompt_path,
            scoring,
            segmentation_head,
            selection,
        )
    finally:
        if sys.modules.get("torch") is stand_in:
            del sys.modules["torch"]
    return types.SimpleNamespace(
        attention=attention,
        config=config,
        decoder=decoder,
        fusion_encoder=fusion_encoder,
        geometry_encoder=geometry_encoder,
        prompt_buffers=prompt_buffers,
        prompt_config=prompt_config,
        prompt_path=prompt_path,
        scoring=scoring,
        segmentation_head=segmentation_head,
        selection=selection,
    )


@contextlib.contextmanager
def mock_device(
    ttnn: Any, m: types.SimpleNamespace, report: dict[str, Any]
) -> Iterator[tuple[Any, Any, Callable[..., Any]]]:
    """One mock device, its grid in report["grid"]; yields (device, the engine's device settings
    for it, zeros(shape, dtype=bfloat16): a zero-valued tile tensor in its DRAM) and closes it."""
    import numpy as np

    device = ttnn.open_device(device_id=0, l1_small_size=32768, trace_region_size=64 << 20)
    grid = device.compute_with_storage_grid_size()
    report["grid"] = [grid.x, grid.y]
    try:
        settings = m.config.device_settings(ttnn, device)

        def zeros(shape: tuple[int, ...], dtype: Any = ttnn.bfloat16) -> Any:
            host = ttnn.Tensor(np.zeros(shape, np.float32), dtype, None, ttnn.TILE_LAYOUT)
            return host.to(device, ttnn.DRAM_MEMORY_CONFIG)

        yield device, settings, zeros
    finally:
        ttnn.close_device(device)


def run_steps(ttnn: Any, steps: dict[str, Callable[[], Any]], entries: dict[str, Any]) -> None:
    """Each step once, in order: its output's shape (the output then freed) or its error in
    entries[name], so one refused call does not hide the others."""
    for name, step in steps.items():
        try:
            out = step()
            entries[name] = {"ok": True, "shape": list(out.shape)}
            ttnn.deallocate(out)
        except Exception as error:
            entries[name] = {"ok": False, "error": f"{type(error).__name__}: {error}"[:3000]}


def run_on_mock(prefix: str, harvest: int, report: dict[str, Any], check: Callable[[], bool]) -> None:
    """`check` inside a fresh mock p150a (toolchain.build in a scratch folder, made the cwd, where
    tt-metal writes generated/); report["ok"] is what it returns. An exception is kept in the
    report (error, traceback), a wheel the mock was not written for as report["unavailable"]."""
    try:
        with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
            os.environ.update(toolchain.build(Path(scratch), harvest))
            os.chdir(scratch)  # tt-metal writes generated/ into the cwd
            try:
                report["ok"] = check()
            except Exception as error:
                report["error"] = f"{type(error).__name__}: {error}"[:3000]
                report["traceback"] = traceback.format_exc()[-3000:]
    except toolchain.MockUnavailableError as error:
        report["unavailable"] = str(error)


def finish(args: argparse.Namespace, report: dict[str, Any], what: str) -> int:
    """Writes the report to --json, prints one status line; the exit status: 0 when the run
    passed or the mock could not run (the report says why), 1 otherwise."""
    args.json.write_text(json.dumps(report))
    status = "ok" if report["ok"] else "FAILED"
    print(f"mock p150a (harvest mask {args.harvest}), {what}: {status}")
    return 0 if report["ok"] or "unavailable" in report else 1
