"""Several chips in one process with the real ttnn 0.81.1 library: a mock of unlinked p150 boards.

Runs inside .venv-ttnn like image_path.py (same manifest, same stand-ins for trace capture and
event waits) with a cluster descriptor of ``--boards`` p150 boards and no Ethernet link between
them (toolchain.cluster_descriptor). What it shows, phase by phase:
- count: how many devices the library reports;
- mesh: whether ``open_mesh_device(MeshShape(1, boards))`` opens them as one mesh;
- open: every chip through the engine's own code, in one call (``BlackholeChips``, the way the
  engine opens several chips), or with ``--alone`` one ``open_blackhole`` per chip, the way a
  single-chip engine opens its own;
- chip N: the engine's chip half (``ChipImageEncoder``) on each chip: upload, compile run and
  capture, one replay; every op is validated by the library on that chip;
- close chip K: the last chip's encoder closes (what taking a chip out of service does);
- chip 0 after: chip 0 replays a frame again, then the rest close.
With ``--alone``, chip 0's replay after the last chip closed crashes the process inside tt-metal
(the report, rewritten after every phase, names the phase it died in).

Usage: .venv-ttnn/bin/python tools/ttnn_mock/chips.py MANIFEST.json --boards 2 --json OUT.json [--alone]
Exit 0 when every phase passed; 1 (with the failing phase and error in the JSON) otherwise.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tools")]

from ttnn_mock import toolchain  # noqa: E402 - after the path set-up above
from ttnn_mock.image_path import MockSession, host_weights, without_torch  # noqa: E402


class Report:
    """The run's findings, written to the JSON file after every phase (a crash keeps them)."""

    def __init__(self, path: Path, **facts: Any) -> None:
        self.path = path
        self.data: dict[str, Any] = {"phases": [], "ok": False, **facts}
        self.write()

    def phase(self, name: str) -> float:
        self.data["phases"].append({"phase": name, "ok": False})
        self.data["phase"] = name
        self.write()
        return time.perf_counter()

    def done(self, started: float, **facts: Any) -> None:
        self.data["phases"][-1].update(ok=True, seconds=round(time.perf_counter() - started, 2), **facts)
        self.write()

    def write(self) -> None:
        self.path.write_text(json.dumps(self.data))


def replay(encoder: Any, session: MockSession, host_input: Any, ttnn: Any) -> list[list[int]]:
    """One frame through the encoder's (stand-in) trace; the output shapes."""
    outputs = encoder.run(host_input)
    ttnn.synchronize_device(encoder.device)
    return [list(ttnn.from_device(t).shape) for t in outputs]


def run(manifest: dict[str, Any], args: argparse.Namespace, report: Report) -> None:
    import numpy as np
    import ttnn

    with without_torch():
        from tt_sam3_ros.engines import ttnn_engine
        from tt_sam3_ros.engines.ttnn_model import config as config_module
        from tt_sam3_ros.engines.ttnn_model import image_encoder
        from tt_sam3_ros.engines.ttnn_model import weights as weights_module

    ids = list(range(args.boards))
    started = report.phase("count")
    report.done(started, devices=int(ttnn.GetNumAvailableDevices()))

    started = report.phase("mesh")
    try:
        mesh = ttnn.open_mesh_device(ttnn.MeshShape(1, args.boards))
    except Exception as error:  # what the library says, kept as the finding
        lines = [line for line in str(error).splitlines() if "mesh shape" in line]
        report.done(started, opened=False, refusal=(lines or [str(error)])[0].strip())
    else:
        ttnn.close_mesh_device(mesh)
        report.done(started, opened=True)

    started = report.phase("open")
    sizes = (ttnn_engine.DEFAULT_L1_SMALL, ttnn_engine.DEFAULT_TRACE_REGION, "worker")
    if args.alone:
        opened = {i: ttnn_engine.open_blackhole(ttnn, i, *sizes) for i in ids}
    else:
        chips = ttnn_engine.BlackholeChips(ids, *sizes, ttnn_module=ttnn)
        opened = {i: chips.device(i) for i in ids}
    grids = {}
    for i, (device, _) in opened.items():
        grid = device.compute_with_storage_grid_size()
        grids[str(i)] = [grid.x, grid.y, list(device.get_device_ids())]
    report.done(started, how="alone" if args.alone else "together", grids=grids)

    config = config_module.ImagePathConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in manifest["config"].items()}
    )
    weights = host_weights(manifest, weights_module)
    encoders: dict[int, tuple[Any, MockSession, Any]] = {}
    try:
        for i in ids:
            started = report.phase(f"chip {i}")
            session = MockSession(ttnn, "normal", real_trace=False)
            device, dispatch = opened[i]
            encoder = image_encoder.ChipImageEncoder(
                session.module,
                config,
                device,
                dispatch,
                matmul_dtype=ttnn.bfloat8_b,
                param_dtype=ttnn.bfloat16,
                command_queues=ttnn_engine.COMMAND_QUEUES,
            )
            encoders[i] = (encoder, session, None)
            encoder.upload(weights)
            host_input = session.from_numpy(
                np.zeros(config.input_shape, np.uint8), ttnn.uint8, layout=ttnn.ROW_MAJOR_LAYOUT
            )
            encoder.capture(host_input)
            trace = encoder._trace
            session.replay = lambda trace=trace: trace.forward(*trace.inputs)
            shapes = replay(encoder, session, host_input, ttnn)
            encoders[i] = (encoder, session, host_input)
            report.done(started, ops=len(session.module.log), outputs=shapes)
        last = ids[-1]
        started = report.phase(f"close chip {last}")
        encoders.pop(last)[0].close()
        report.done(started)
        started = report.phase("chip 0 after")
        encoder, session, host_input = encoders[0]
        shapes = replay(encoder, session, host_input, ttnn)
        report.done(started, outputs=shapes)
    finally:
        for encoder, _, _ in encoders.values():
            encoder.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--boards", type=int, default=2)
    parser.add_argument("--alone", action="store_true", help="open each chip on its own (the hazard)")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    args.json = args.json.resolve()
    manifest = json.loads(args.manifest.resolve().read_text())
    report = Report(args.json, boards=args.boards)
    report.data["ttnn_version"] = importlib.metadata.version("ttnn")
    try:
        with tempfile.TemporaryDirectory(prefix="ttnn-mock-chips-") as scratch:
            env = toolchain.build(Path(scratch), toolchain.HARVEST_MASKS["unharvested"], boards=args.boards)
            os.environ.update(env)
            os.chdir(scratch)  # tt-metal writes generated/ into the cwd
            try:
                run(manifest, args, report)
                report.data["ok"] = True
            except Exception as error:
                report.data["error"] = f"{type(error).__name__}: {error}"[:4000]
                report.data["failed_phase"] = report.data.get("phase")
                report.data["traceback"] = traceback.format_exc()[-4000:]
    except toolchain.MockUnavailableError as error:
        report.data["unavailable"] = str(error)
    report.write()
    failed = f"failed in {report.data.get('phase')}"
    status = "ok" if report.data["ok"] else report.data.get("unavailable") or failed
    print(f"mock of {args.boards} p150 boards: {status}")
    return 0 if report.data["ok"] or "unavailable" in report.data else 1


if __name__ == "__main__":
    sys.exit(main())
