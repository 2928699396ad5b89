"""Finding ttnn and opening a Blackhole chip the way current tt-metal supports it."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
from pathlib import Path
from typing import Any

import yaml

from ..base import EngineError

LOG = logging.getLogger(__name__)

#: The ttnn release this engine's calls were checked against (tools/ttnn_conformance.py).
WRITTEN_AGAINST_TTNN = "0.81.1"
#: Device memory for the captured command stream of the image path. Not yet measured on a
#: chip: docs/device_validation.md asks for the size the capture reports.
DEFAULT_TRACE_REGION = 64 * 1024 * 1024
#: L1 reserved for conv2d's halo and config tensors.
DEFAULT_L1_SMALL = 32 * 1024
#: How the chip is opened: "auto" (Ethernet dispatch when the installed build can open it, else
#: worker), "worker" (tt-metal's Blackhole default) or "ethernet" (asked for, with a fallback).
DISPATCH_MODES = ("auto", "worker", "ethernet")
#: Ethernet cores a p150a can lend to dispatch (docs/design/facts.md, tt-metal review: at most 12 of the
#: die's 14).
P150A_DISPATCH_ETH_CORES = 12
#: tt-metal's Ethernet-dispatch core descriptor for a 140-core Blackhole, relative to its root.
ETH_DISPATCH_DESCRIPTOR = Path("tt_metal", "core_descriptors", "blackhole_140_arch_eth_dispatch.yaml")
#: Command queues the chip is opened with: queue 0 replays the traces, queue 1 uploads the next
#: frame meanwhile (trace.py), as Tenstorrent's trace + 2-CQ demos run.
COMMAND_QUEUES = 2


def load_ttnn(ttnn_module: Any = None) -> Any:
    """The injected module, else the environment's ttnn, with an actionable error if absent."""
    if ttnn_module is not None:
        return ttnn_module
    try:
        return importlib.import_module("ttnn")
    except ImportError as error:
        raise EngineError(
            "the ttnn engine needs TT-NN, which comes with tt-metal (activate its python_env or use "
            f"Tenstorrent's container); it is not a pip dependency of tt_sam3_ros: {error}"
        ) from error


def ttnn_version(ttnn: Any) -> str:
    """Installed ttnn version: package metadata, else the module's __version__, else 'unknown'."""
    version = getattr(ttnn, "__version__", None)
    if version:
        return str(version)
    try:
        return importlib.metadata.version("ttnn")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _descriptor_roots(ttnn: Any) -> list[Path]:
    """Where a tt-metal build keeps its core descriptors: the runtime root tt-metal itself reads
    (TT_METAL_RUNTIME_ROOT, TT_METAL_HOME), the wheel's package folder, a source tree's root."""
    roots = [
        Path(os.environ[name]) for name in ("TT_METAL_RUNTIME_ROOT", "TT_METAL_HOME") if os.environ.get(name)
    ]
    module_file = getattr(ttnn, "__file__", None)
    if module_file:
        package = Path(module_file).resolve().parent
        roots += [package, package.parent.parent]  # wheel: ttnn/tt_metal; source tree: <root>/ttnn/ttnn
    return roots


def ethernet_dispatch_probe(
    ttnn: Any, command_queues: int = 1, roots: list[Path] | None = None
) -> tuple[bool, str]:
    """Whether the installed build can open a p150a with Ethernet dispatch, and why: read from the
    build's Ethernet-dispatch core descriptor, without opening anything.

    Opening is not a safe probe: a refused Ethernet open happens deep in device initialisation, and
    whether the process can still open the chip afterwards is known only for the mock (docs/design/facts.md,
    Mock p150a).
    The descriptor is what fails on current builds: it lists more Ethernet dispatch cores than a
    p150a has, and the allocator's configuration walks all of them ("No core coordinate found").
    A build whose every harvesting variant lists at most P150A_DISPATCH_ETH_CORES cores for this
    many command queues is taken to open; no descriptor, or one this code cannot read, is a no.
    """
    for root in roots if roots is not None else _descriptor_roots(ttnn):
        path = root / ETH_DISPATCH_DESCRIPTOR
        if path.is_file():
            return _read_descriptor(path, command_queues)
    return False, "no Ethernet-dispatch core descriptor found in the installed build"


def _read_descriptor(path: Path, command_queues: int) -> tuple[bool, str]:
    try:
        variants = yaml.safe_load(path.read_text())
        counts = {
            name: len({tuple(core) for core in variant["col"][command_queues]["dispatch_cores"]})
            for name, variant in variants.items()
        }
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as error:
        return False, f"{path} could not be read as a core descriptor ({type(error).__name__}: {error})"
    if not counts:
        return False, f"{path} describes no chip"
    most = max(counts.values())
    if most > P150A_DISPATCH_ETH_CORES:
        return False, (
            f"{path} lists {most} Ethernet dispatch cores for {command_queues} command queue(s); "
            f"a p150a has at most {P150A_DISPATCH_ETH_CORES}"
        )
    return True, f"{path} lists at most {most} Ethernet dispatch cores"


def open_blackhole(
    ttnn: Any, device_id: int, l1_small_size: int, trace_region_size: int, dispatch: str = "auto"
) -> tuple[Any, str]:
    """Open one chip as current tt-metal supports it; returns (device, dispatch used).

    The chip is opened as a 1x1 mesh with COMMAND_QUEUES (2) command queues, through
    open_mesh_device: its signature names num_command_queues (open_device's binding in 0.81.1
    does not list it) and it is how Tenstorrent's mesh fixtures open a chip for trace + 2 CQs.
    "auto" (the default): "ethernet" when ethernet_dispatch_probe says the installed build can
    open it (one more column computes), else "worker". "worker": no dispatch arguments, so
    tt-metal picks its Blackhole default (worker cores on a column dispatch), which is how
    Tenstorrent's own SAM 3 demo opens the chip. "ethernet": current Blackhole builds cannot open
    it (their Ethernet-dispatch core descriptor lists more cores than the chip has), and when it
    fails the chip is opened with worker dispatch in the same process, with a warning (the real
    library allows that retry on a mock p150a; docs/device_validation.md asks a chip owner to confirm
    it on a chip).
    The compute grid is never assumed: callers read it from the opened device. When no open
    works, the error names the likely causes: no chip, or one held by another process.
    """
    if dispatch not in DISPATCH_MODES:
        raise EngineError(f"dispatch {dispatch!r} is not one of {', '.join(DISPATCH_MODES)}")
    sizes = dict(
        mesh_shape=ttnn.MeshShape(1, 1),
        physical_device_ids=[device_id],
        l1_small_size=l1_small_size,
        trace_region_size=trace_region_size,
        num_command_queues=COMMAND_QUEUES,
    )
    failures = []
    if dispatch == "auto":
        opens, reason = ethernet_dispatch_probe(ttnn)
        dispatch = "ethernet" if opens else "worker"
        LOG.info("dispatch: %s (%s)", dispatch, reason)
    if dispatch == "ethernet":
        try:
            eth = ttnn.DispatchCoreConfig(type=ttnn.DispatchCoreType.ETH)
            return ttnn.open_mesh_device(**sizes, dispatch_core_config=eth), "ethernet"
        except Exception as error:
            failures.append(f"ethernet dispatch: {error}")
            LOG.warning("Ethernet dispatch did not open (%s); retrying with worker dispatch", error)
    try:
        return ttnn.open_mesh_device(**sizes), "worker"
    except Exception as error:
        failures.append(f"worker dispatch: {error}")
    raise EngineError(
        f"cannot open Blackhole chip {device_id}: it is absent, or held by another process (one process owns "
        f"a chip; check `tt-smi` and stop the other user). Details: {'; '.join(failures)}"
    )
