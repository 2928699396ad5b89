"""Run the engine's image path with the real ttnn library on a mock p150a (docs/design/facts.md, Mock p150a).

Runs inside .venv-ttnn (CPython 3.12, ttnn 0.81.1), which has no torch: the weights come as
a manifest (the image-path config and each prepared weight's name, role and shape, written
by ``manifest.py`` where torch is) and are uploaded as zeros, since nothing computes on the
mock. Everything else is the engine's own code: ``open_blackhole`` (its default dispatch, or
``--dispatch``), and the chip half of the engine, ``ChipImageEncoder`` (``device_settings``, ``upload``,
``forward``, ``capture`` with ``TracedImagePath``: input buffer, compile run, capture, replay;
``close``).

What the mock cannot do, and what this runner does instead: trace capture segfaults inside
tt-metal on the mock (Buffer::address() under generate_trace_dispatch_commands, even for one
ttnn.add; ``--real-trace`` tries it anyway), so begin/end_trace_capture are stand-ins and the
captured forward runs eagerly, and execute_trace runs that forward eagerly again on the
trace's input buffer: the ops a trace would hold are checked, the trace itself is not.
The chip is opened as the engine opens it, with two command queues: the upload on queue 1 into
the staging buffer, record_event and the staging copy (ttnn.copy) run for real; wait_for_event
segfaults on the mock (DeviceCommand::add_dispatch_wait under enqueue_wait_for_event), so it is
a stand-in (every call here is synchronous on the mock anyway).

Modes:
    normal       (default) real allocator: out-of-memory and circular-buffer clashes raise.
    no_dispatch  one NO_DISPATCH graph capture per stage (patch embedding, each ViT block, the
                 neck), or per op with --per-op: validation runs, allocations are faked, and each
                 capture's per-core peak L1 / circular-buffer use is reported (buffers made
                 before the capture are not counted).

Usage: .venv-ttnn/bin/python tools/ttnn_mock/image_path.py MANIFEST.json --harvest 3 --json OUT.json
Exit 0 when every phase passed; 1 (with the failing phase, op and error in the JSON) otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tools")]

from ttnn_mock import oplog, toolchain  # noqa: E402 - after the path set-up above

L1_BANK_BYTES = 1_428_352


@contextlib.contextmanager
def without_torch():
    """Let the engine's modules import where torch is absent (they use it only in host-side
    helpers this runner does not call); the stand-in is removed again before ttnn can see it."""
    if importlib.util.find_spec("torch") is not None:
        yield
        return

    def missing(name: str) -> Any:
        raise ImportError(f"torch.{name}: torch is not installed in .venv-ttnn (the mock gets numpy weights)")

    stand_in = types.ModuleType("torch")
    stand_in.__getattr__ = missing  # type: ignore[method-assign]
    sys.modules["torch"] = stand_in
    try:
        yield
    finally:
        if sys.modules.get("torch") is stand_in:
            del sys.modules["torch"]


def host_weights(manifest: dict[str, Any], weights_module: Any) -> dict[str, Any]:
    """The manifest's weights as the engine's HostWeight, zero-valued numpy arrays."""
    import numpy as np

    return {
        spec["name"]: weights_module.HostWeight(np.zeros(spec["shape"], np.float32), spec["kind"])
        for spec in manifest["weights"]
    }


class MockSession:
    """The ttnn module as the engine sees it on the mock: recorded, with the stand-ins above."""

    def __init__(self, ttnn: Any, mode: str, real_trace: bool, per_op: bool = False) -> None:
        self.ttnn = ttnn
        self.mode = mode
        self.per_op = per_op
        self.stages: list[dict[str, Any]] = []
        self._stage_key: tuple | None = None
        self._stage_ops = 0
        self.replay: Any = None
        overrides: dict[str, Any] = {"from_torch": self.from_numpy, "as_tensor": self.as_tensor}
        if not real_trace:
            overrides.update(
                wait_for_event=lambda *a, **k: None,
                begin_trace_capture=self.begin_trace_capture,
                end_trace_capture=lambda *a, **k: None,
                execute_trace=self.execute_trace,
                release_trace=lambda *a, **k: None,
            )
        hook = self.before_op if mode == "no_dispatch" else None
        self.module = oplog.Recorder(ttnn, overrides, hook)
        self.pending: str | None = None

    # numpy in place of torch (the wheel's from_torch/as_tensor import torch) -----------------
    def from_numpy(self, values, dtype=None, *, layout=None, device=None, memory_config=None, **unused):
        tensor = self.ttnn.Tensor(values, dtype, None, layout or self.ttnn.ROW_MAJOR_LAYOUT)
        if device is None:
            return tensor
        return tensor.to(device, memory_config or self.ttnn.DRAM_MEMORY_CONFIG)

    def as_tensor(self, values, dtype=None, *, layout=None, device=None, memory_config=None, **unused):
        return self.from_numpy(values, dtype, layout=layout, device=device, memory_config=memory_config)

    # trace stand-ins (capture segfaults on the mock) -----------------------------------------
    def begin_trace_capture(self, device, cq_id=0):
        return "eager-stand-in"

    def execute_trace(self, device, trace_id, cq_id=0, blocking=False):
        """One eager run of the captured forward on the trace's input buffer."""
        for tensor in self.replay():
            self.ttnn.deallocate(tensor)

    # NO_DISPATCH: one graph capture per stage -------------------------------------------------
    def before_op(self, name: str, stage: str, block: int | None) -> None:
        key = (stage, block, len(self.module.log)) if self.per_op else (stage, block)
        if key != self._stage_key:
            self.end_stage()
            self._stage_key = key
            self.ttnn._ttnn.graph.begin_graph_capture(self.ttnn._ttnn.graph.RunMode.NO_DISPATCH)
        self._stage_ops += 1

    def end_stage(self) -> None:
        if self._stage_key is None:
            return
        graph = self.ttnn._ttnn.graph.end_graph_capture()
        usage = self.ttnn._ttnn.graph.extract_resource_usage_per_core(graph)
        stage, block = self._stage_key[:2]
        windowed = next((r.windowed for r in reversed(self.module.log) if r.block == block), None)
        if self.per_op and self.module.log:
            last = self.module.log[-1]
            op = {"op": last.op, "inputs": [t.shape for t in last.inputs[:2]]}
        else:
            op = {}
        self.stages.append(
            {
                **op,
                "stage": stage,
                "block": block,
                "windowed": windowed if stage == "vit_block" else None,
                "ops": self._stage_ops,
                "peak_l1": int(usage.peak_l1),
                "peak_cb": int(usage.peak_cb),
                "peak_dataflow_buffer": int(getattr(usage, "peak_dataflow_buffer", 0)),
                "peak_scratchpad": int(getattr(usage, "peak_scratchpad", 0)),
                "peak_total": int(usage.peak_total),
            }
        )
        self._stage_key, self._stage_ops = None, 0


def run(manifest: dict[str, Any], args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Every phase of the image path on the mock; fills `report` as it goes (phase by phase)."""
    import numpy as np
    import ttnn

    with without_torch():
        from tt_sam3_ros.engines import ttnn_engine
        from tt_sam3_ros.engines.ttnn_model import attention as attention_module
        from tt_sam3_ros.engines.ttnn_model import config as config_module
        from tt_sam3_ros.engines.ttnn_model import geometry_encoder, image_encoder
        from tt_sam3_ros.engines.ttnn_model import weights as weights_module

    mode, dispatch_asked = args.mode, args.dispatch
    session = MockSession(ttnn, mode, args.real_trace, per_op=args.per_op)
    module = session.module
    report["_pending"] = lambda: module.pending
    config = config_module.ImagePathConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in manifest["config"].items()}
    )
    geometry = None
    if "geometry" in manifest:
        fields = dict(manifest["geometry"])
        fields["attention"] = attention_module.AttentionShape(**fields["attention"])
        geometry = geometry_encoder.GeometryConfig(**fields)
    phases = report["phases"]

    def phase(name: str):
        phases.append({"phase": name, "ok": False})
        report["phase"] = name
        return time.perf_counter()

    def done(started: float, **facts: Any) -> None:
        phases[-1].update(ok=True, seconds=round(time.perf_counter() - started, 2), **facts)

    started = phase("open")
    asked = {"dispatch": dispatch_asked} if dispatch_asked else {}
    device, dispatch = ttnn_engine.open_blackhole(
        module, 0, ttnn_engine.DEFAULT_L1_SMALL, ttnn_engine.DEFAULT_TRACE_REGION, **asked
    )
    grid = device.compute_with_storage_grid_size()
    report["grid"] = [grid.x, grid.y]
    report["dispatch"] = dispatch
    dtypes = {"bfloat8_b": ttnn.bfloat8_b, "bfloat16": ttnn.bfloat16, "float32": ttnn.float32}
    try:
        engine = image_encoder.ChipImageEncoder(
            module,
            config,
            device,
            dispatch,
            matmul_dtype=dtypes[manifest.get("weight_dtype", "bfloat8_b")],
            param_dtype=dtypes[manifest.get("param_dtype", "bfloat16")],
            command_queues=ttnn_engine.COMMAND_QUEUES,
            geometry=geometry,
        )
    except BaseException:
        ttnn.close_device(device)
        raise
    report["command_queues"] = engine.command_queues
    done(started, dispatch=dispatch, grid=[grid.x, grid.y], command_queues=engine.command_queues)
    try:
        started = phase("upload")
        engine.upload(host_weights(manifest, weights_module))
        done(started, tensors=len(engine.weights))
        host_input = session.from_numpy(
            np.zeros(config.input_shape, np.uint8),
            ttnn.uint8,
            layout=ttnn.ROW_MAJOR_LAYOUT,  # what TtnnEngine._host_input uploads
        )
        if mode == "no_dispatch":
            started = phase("no_dispatch forward")
            image = ttnn.allocate_tensor_on_device(
                ttnn.Shape(list(config.input_shape)),
                ttnn.uint8,
                ttnn.ROW_MAJOR_LAYOUT,  # the engine's input buffer: cast, patchified, tilized by the forward
                engine.device,
                ttnn.DRAM_MEMORY_CONFIG,
            )
            try:
                engine.forward(image)
            finally:
                session.end_stage()
            report["stages"] = session.stages
            done(started, ops=len(module.log))
        else:
            started = phase("compile run + capture")
            ops_before = len(module.log)
            engine.capture(host_input)
            trace = engine._trace
            session.replay = lambda: trace.forward(*trace.inputs)
            traced = "real" if args.real_trace else "eager stand-in"
            done(started, ops=len(module.log) - ops_before, traced=traced)
            started = phase("replay")
            ops_before = len(module.log)
            outputs = trace.run(host_input)
            ttnn.synchronize_device(engine.device)
            shapes = [list(ttnn.from_device(t).shape) for t in outputs]
            done(started, ops=len(module.log) - ops_before, outputs=shapes)
            report["outputs"] = shapes
        report["ops"] = [record.to_json() for record in module.log]
    except BaseException:
        report["failed_phase"] = report["phase"]
        raise
    finally:
        started = phase("close")
        engine.close()
        done(started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--harvest", type=int, default=toolchain.HARVEST_MASKS["harvested"])
    parser.add_argument("--mode", choices=("normal", "no_dispatch"), default="normal")
    parser.add_argument("--real-trace", action="store_true", help="really capture (segfaults on 0.81.1)")
    parser.add_argument("--dispatch", help="passed to open_blackhole (default: the engine's default)")
    parser.add_argument(
        "--per-op", action="store_true", help="no_dispatch: one capture per op, not per stage"
    )
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    args.json = args.json.resolve()
    args.manifest = args.manifest.resolve()
    manifest = json.loads(args.manifest.read_text())
    report: dict[str, Any] = {"mode": args.mode, "harvest_mask": args.harvest, "phases": [], "ok": False}
    report["ttnn_version"] = importlib.metadata.version("ttnn") if importlib.util.find_spec("ttnn") else None
    try:
        with tempfile.TemporaryDirectory(prefix="ttnn-mock-") as scratch:
            os.environ.update(toolchain.build(Path(scratch), args.harvest))
            os.chdir(scratch)  # tt-metal writes generated/ (fabric maps, watcher lists) into the cwd
            started = time.perf_counter()

            def session_pending() -> Any:
                pending = report.pop("_pending", None)
                return list(pending()) if pending is not None and pending() else None

            try:
                run(manifest, args, report)
                report["ok"] = True
            except Exception as error:
                report["error"] = f"{type(error).__name__}: {error}"[:4000]
                report["failed_op"] = session_pending()
                report["traceback"] = traceback.format_exc()[-4000:]
            report["seconds"] = round(time.perf_counter() - started, 2)
    except toolchain.MockUnavailableError as error:
        report["unavailable"] = str(error)
    report.pop("_pending", None)
    args.json.write_text(json.dumps(report))
    status = "ok" if report["ok"] else report.get("unavailable") or f"failed in {report.get('failed_phase')}"
    print(f"mock p150a (harvest mask {args.harvest}, {args.mode}): {status}")
    return 0 if report["ok"] or "unavailable" in report else 1


if __name__ == "__main__":
    sys.exit(main())
