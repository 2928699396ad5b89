"""Finding ttnn and opening a Blackhole chip the way current tt-metal supports it."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from typing import Any

from ..base import EngineError

LOG = logging.getLogger(__name__)

#: The ttnn release this engine's calls were checked against (tools/ttnn_conformance.py).
WRITTEN_AGAINST_TTNN = "0.81.1"
#: Device memory for the captured command stream of the image path. Not yet measured on a
#: chip: DEVICE_VALIDATION.md asks for the size the capture reports.
DEFAULT_TRACE_REGION = 64 * 1024 * 1024
#: L1 reserved for conv2d's halo and config tensors.
DEFAULT_L1_SMALL = 32 * 1024
#: How the chip is opened: "worker" (tt-metal's Blackhole default) or "ethernet" (asked for).
DISPATCH_MODES = ("worker", "ethernet")


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


def open_blackhole(
    ttnn: Any, device_id: int, l1_small_size: int, trace_region_size: int, dispatch: str = "worker"
) -> tuple[Any, str]:
    """Open one chip as current tt-metal supports it; returns (device, dispatch used).

    "worker": no dispatch arguments, so tt-metal picks its Blackhole default (worker cores on a
    column dispatch), which is how Tenstorrent's own SAM 3 demo opens the chip. "ethernet" is
    tried only when asked for: current Blackhole builds cannot open it (their Ethernet-dispatch
    core descriptor lists more cores than the chip has), and when it fails the chip is opened
    with worker dispatch in the same process, with a warning (the real library allows that
    retry on a mock p150a; DEVICE_VALIDATION.md asks a chip owner to confirm it on a chip).
    The compute grid is never assumed: callers read it from the opened device. When no open
    works, the error names the likely causes: no chip, or one held by another process.
    """
    if dispatch not in DISPATCH_MODES:
        raise EngineError(f"dispatch {dispatch!r} is not one of {', '.join(DISPATCH_MODES)}")
    sizes = dict(device_id=device_id, l1_small_size=l1_small_size, trace_region_size=trace_region_size)
    failures = []
    if dispatch == "ethernet":
        try:
            eth = ttnn.DispatchCoreConfig(type=ttnn.DispatchCoreType.ETH)
            return ttnn.open_device(**sizes, dispatch_core_config=eth), "ethernet"
        except Exception as error:
            failures.append(f"ethernet dispatch: {error}")
            LOG.warning("Ethernet dispatch did not open (%s); retrying with worker dispatch", error)
    try:
        return ttnn.open_device(**sizes), "worker"
    except Exception as error:
        failures.append(f"worker dispatch: {error}")
    raise EngineError(
        f"cannot open Blackhole chip {device_id}: it is absent, or held by another process (one process owns "
        f"a chip; check `tt-smi` and stop the other user). Details: {'; '.join(failures)}"
    )
