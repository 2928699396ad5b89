"""Finding ttnn and opening a Blackhole chip the way current tt-metal supports it."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from tt_sam3_ros.engines.base import EngineError

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


#: Where tt-metal looks for a simulator to open instead of a chip: the path of Tenstorrent's ttsim
#: library (libttsim_bh.so for Blackhole), which must sit beside a soc_descriptor.yaml (ttsim's
#: README). ttsim runs tt-metal in slow dispatch only, so a simulated chip is opened with
#: SLOW_DISPATCH_ENV=1, one command queue and no trace (traces are a fast-dispatch feature).
SIMULATOR_ENV = "TT_METAL_SIMULATOR"
SLOW_DISPATCH_ENV = "TT_METAL_SLOW_DISPATCH_MODE"
#: The file ttsim reads beside its library.
SIMULATOR_DESCRIPTOR = "soc_descriptor.yaml"
#: How a simulated chip is driven: slow dispatch takes one command queue.
SIMULATOR_COMMAND_QUEUES = 1
#: The dispatch a simulated chip runs, as open_blackhole reports it.
SIMULATED_DISPATCH = "slow (simulator)"


def find_simulator(environ: Any = None) -> Path | None:
    """The simulator tt-metal will open instead of a chip: SIMULATOR_ENV's path, or None when it is
    unset (a real chip is opened). Sets SLOW_DISPATCH_ENV to 1 when it is unset, before tt-metal
    reads it at the first open.

    Raises:
        EngineError: SIMULATOR_ENV names no file, its folder has no SIMULATOR_DESCRIPTOR, or slow
            dispatch is turned off (ttsim cannot run fast dispatch): each with what to do.
    """
    environ = os.environ if environ is None else environ
    value = environ.get(SIMULATOR_ENV, "")
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise EngineError(
            f"{SIMULATOR_ENV}={value}: no such file; point it at ttsim's libttsim_bh.so or unset it"
        )
    if not (path.parent / SIMULATOR_DESCRIPTOR).is_file():
        raise EngineError(
            f"{SIMULATOR_ENV}={value}: no {SIMULATOR_DESCRIPTOR} beside it; copy tt-metal's "
            "tt_metal/soc_descriptors/blackhole_140_arch.yaml there under that name"
        )
    slow = environ.get(SLOW_DISPATCH_ENV)
    if slow is None:
        environ[SLOW_DISPATCH_ENV] = "1"
        LOG.info("simulator %s: %s=1 set (the simulator runs slow dispatch only)", path, SLOW_DISPATCH_ENV)
    elif slow != "1":
        raise EngineError(
            f"{SIMULATOR_ENV} is set but {SLOW_DISPATCH_ENV}={slow}: the simulator runs slow dispatch "
            f"only; set {SLOW_DISPATCH_ENV}=1 or unset it"
        )
    return path


#: tt-metal's mock cluster: a cluster descriptor that stands in for the chips, every driver call
#: mocked (docs/design/facts.md, Mock p150a). Nothing is dispatched there, and ttnn 0.81.1
#: segfaults on it in wait_for_event (DeviceCommand::add_dispatch_wait) and in trace capture
#: (Buffer::address() under generate_trace_dispatch_commands), so a mock chip runs without a trace.
MOCK_CLUSTER_ENV = "TT_METAL_MOCK_CLUSTER_DESC_PATH"


def find_mock_cluster(environ: Any = None) -> Path | None:
    """The cluster descriptor tt-metal mocks its chips from (MOCK_CLUSTER_ENV), or None when it is
    unset (real chips are opened). Only a mock sets it: a robot's host never does."""
    value = (os.environ if environ is None else environ).get(MOCK_CLUSTER_ENV, "")
    return Path(value).expanduser() if value else None


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
    ttnn: Any,
    device_id: int,
    l1_small_size: int,
    trace_region_size: int,
    dispatch: str = "auto",
    simulator: Path | None = None,
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
    With `simulator` (find_simulator's path) the simulated chip is opened with slow dispatch and
    SIMULATOR_COMMAND_QUEUES, whatever `dispatch` says; the dispatch used reads "slow (simulator)".
    """
    _check_dispatch(dispatch)
    sizes = dict(
        mesh_shape=ttnn.MeshShape(1, 1),
        physical_device_ids=[device_id],
        l1_small_size=l1_small_size,
        trace_region_size=trace_region_size,
        num_command_queues=COMMAND_QUEUES if simulator is None else SIMULATOR_COMMAND_QUEUES,
    )
    if simulator is not None:
        try:
            return ttnn.open_mesh_device(**sizes), SIMULATED_DISPATCH
        except Exception as error:
            raise EngineError(
                f"cannot open the simulated Blackhole ({SIMULATOR_ENV}={simulator}): {error}"
            ) from error
    return _open_with_dispatch(
        ttnn,
        dispatch,
        lambda **dispatch_args: ttnn.open_mesh_device(**sizes, **dispatch_args),
        f"cannot open Blackhole chip {device_id}: it is absent",
    )


def open_blackholes(
    ttnn: Any, device_ids: Sequence[int], l1_small_size: int, trace_region_size: int, dispatch: str = "auto"
) -> tuple[dict[int, Any], str]:
    """Open several chips in one call (ttnn.CreateDevices); returns ({chip id: device}, dispatch used).

    Each device is a 1x1 mesh with COMMAND_QUEUES command queues, as open_blackhole opens one, and
    each can be closed on its own (ttnn.close_device) while the others keep serving, in any order.
    Why one call: ttnn 0.81.1 ties a chip opened on its own (open_mesh_device, open_device, or
    CreateDevices of that chip alone) to every chip opened before it in the process: closing it
    closes those too, and their next op crashes the process (docs/design/facts.md, Mock p150a).
    `dispatch` as open_blackhole: "auto" asks ethernet_dispatch_probe, "ethernet" falls back to
    worker dispatch with a warning.
    """
    _check_dispatch(dispatch)
    ids = list(dict.fromkeys(int(device_id) for device_id in device_ids))
    if not ids:
        raise EngineError("no chip to open")
    sizes = dict(
        num_command_queues=COMMAND_QUEUES, l1_small_size=l1_small_size, trace_region_size=trace_region_size
    )
    return _open_with_dispatch(
        ttnn,
        dispatch,
        lambda **dispatch_args: dict(ttnn.CreateDevices(ids, **sizes, **dispatch_args)),
        f"cannot open Blackhole chips {', '.join(map(str, ids))}: one is absent",
    )


def _check_dispatch(dispatch: str) -> None:
    """Raises EngineError when `dispatch` is not one of DISPATCH_MODES."""
    if dispatch not in DISPATCH_MODES:
        raise EngineError(f"dispatch {dispatch!r} is not one of {', '.join(DISPATCH_MODES)}")


def _open_with_dispatch(
    ttnn: Any, dispatch: str, open_chips: Callable[..., Any], absent: str
) -> tuple[Any, str]:
    """open_chips() with the dispatch `dispatch` asks for; returns (what it opened, dispatch used).

    open_blackhole and open_blackholes open differently (one mesh, several devices) but choose
    dispatch the same way: "auto" asks ethernet_dispatch_probe, "ethernet" is tried with
    open_chips(dispatch_core_config=...) and falls back to worker dispatch (open_chips()) with a
    warning. When nothing opens, the EngineError starts with `absent` and adds the likely cause
    and every failure.
    """
    failures = []
    if dispatch == "auto":
        opens, reason = ethernet_dispatch_probe(ttnn)
        dispatch = "ethernet" if opens else "worker"
        LOG.info("dispatch: %s (%s)", dispatch, reason)
    if dispatch == "ethernet":
        try:
            eth = ttnn.DispatchCoreConfig(type=ttnn.DispatchCoreType.ETH)
            return open_chips(dispatch_core_config=eth), "ethernet"
        except Exception as error:
            failures.append(f"ethernet dispatch: {error}")
            LOG.warning("Ethernet dispatch did not open (%s); retrying with worker dispatch", error)
    try:
        return open_chips(), "worker"
    except Exception as error:
        failures.append(f"worker dispatch: {error}")
    raise EngineError(
        f"{absent}, or held by another process (one process owns a chip; check `tt-smi` and stop the "
        f"other user). Details: {'; '.join(failures)}"
    )


class BlackholeChips:
    """The chips one process serves with several engines, opened together so each closes alone.

    Hand the same object to every engine (``TtnnEngine(..., chips=...)``): the first ``device``
    call, from whichever thread, opens every chip in one open_blackholes call; each engine then
    takes its own chip's device and closes it (ttnn.close_device) when it is done or fails,
    while the other engines go on. A failed open is not retried: every later ``device`` call
    raises the same error (a new object, at the next configure, tries again). A chip whose engine
    never took its device (its build failed before) is closed by ``close_unclaimed``.
    """

    def __init__(
        self,
        device_ids: Sequence[int],
        l1_small_size: int = DEFAULT_L1_SMALL,
        trace_region_size: int = DEFAULT_TRACE_REGION,
        dispatch: str = "auto",
        ttnn_module: Any = None,
    ) -> None:
        _check_dispatch(dispatch)
        self.device_ids = tuple(dict.fromkeys(int(device_id) for device_id in device_ids))
        if not self.device_ids:
            raise EngineError("BlackholeChips needs at least one chip id")
        self.l1_small_size, self.trace_region_size, self.dispatch = l1_small_size, trace_region_size, dispatch
        self._ttnn_module = ttnn_module
        self._lock = threading.Lock()
        self._devices: dict[int, Any] | None = None
        self._claimed: set[int] = set()
        self._used = ""
        self._error: EngineError | None = None

    def device(self, device_id: int) -> tuple[Any, str]:
        """Chip `device_id`'s open device and the dispatch it was opened with; opens every chip
        on the first call.

        Raises:
            EngineError: `device_id` is not one of this set's chips, or the chips cannot be opened.
        """
        if device_id not in self.device_ids:
            known = ", ".join(map(str, self.device_ids))
            raise EngineError(f"chip {device_id} is not one of the chips opened together ({known})")
        with self._lock:
            if self._devices is None and self._error is None:
                try:
                    ttnn = load_ttnn(self._ttnn_module)
                    self._devices, self._used = open_blackholes(
                        ttnn, self.device_ids, self.l1_small_size, self.trace_region_size, self.dispatch
                    )
                except EngineError as error:
                    self._error = error
            if self._error is not None:
                raise self._error
            assert self._devices is not None
            self._claimed.add(device_id)
            return self._devices[device_id], self._used

    def close_unclaimed(self) -> list[int]:
        """Close every opened chip no engine took (its build failed before); returns their ids.
        Call once every engine has been built or has failed: a chip closed here cannot be taken."""
        with self._lock:
            if self._devices is None:
                return []
            unclaimed = [i for i in self.device_ids if i not in self._claimed]
            self._claimed.update(unclaimed)
            ttnn = load_ttnn(self._ttnn_module)
            for device_id in unclaimed:
                ttnn.close_device(self._devices[device_id])
            return unclaimed
