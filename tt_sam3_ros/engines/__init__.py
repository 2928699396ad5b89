"""Engines that run SAM 3, and the choice between them.

``auto`` prefers a Tenstorrent Blackhole (ttnn) when one is present and usable,
then a CUDA device, then the CPU, and says which it took and why: a robot's log
should show at a glance whether it is running on the accelerator it paid for.
A ``device`` setting decides it: a chip id (0, 1, ...) means ttnn, any other
device (cpu, cuda:N) torch.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from tt_sam3_ros.core.prompts import MAX_PROMPTS
from tt_sam3_ros.engines.base import (
    MASK_SIDE,
    MODEL_SIDE,
    TTNN_DTYPE_NAMES,
    DecodedBatch,
    Engine,
    EngineError,
)

# Several chips opened together, which the engines on them share: the facade's, so that callers
# (the node) never reach into ttnn_model. Importing it imports no ttnn.
from tt_sam3_ros.engines.ttnn_model.device import BlackholeChips

__all__ = [
    "CHECKED_STAGES",
    "ENGINE_NAMES",
    "MASK_SIDE",
    "MODEL_SIDE",
    "TTNN_DTYPE_NAMES",
    "BlackholeChips",
    "DecodedBatch",
    "Engine",
    "EngineError",
    "blackhole_status",
    "chip_count",
    "chip_id",
    "choose_engine",
    "create_engine",
    "is_chip_id",
    "torch_device",
]

LOG = logging.getLogger(__name__)

ENGINE_NAMES = ("auto", "torch", "ttnn")
#: The ttnn engine's options that callers (node, CLI) may pass through create_engine.
TTNN_OPTIONS = ("weight_cache", "weight_dtype", "param_dtype", "prompt_path")
#: Where the ttnn engine runs the prompt path: auto (the chip's when its warm-up check against the
#: host's passes, else the host's: ttnn_model/prompt_check.py), on the host CPU (the torch
#: engine's modules) or on the chip as a second trace (ttnn_model/prompt_path.py).
TTNN_PROMPT_PATHS = ("auto", "host", "chip")
#: The prompt path the factory (create_engine: the node, the CLI, Sam3Segmenter.from_pretrained)
#: gives the ttnn engine when none is named; TtnnEngine's own default stays "host", the part
#: without a check.
DEFAULT_TTNN_PROMPT_PATH = "auto"
#: The ttnn engine's warm-up checks of its risky stages against the host (ttnn_model/stage_checks.py)
#: as describe() and /diagnostics name them, each with the form that serves and why; beside them
#: "input" (the uint8 upload) and "prompt_path" (the whole chip prompt path).
CHECKED_STAGES = ("neck_convs", "topk", "group_norm", "pixel_decoder_convs")
#: Where the Tenstorrent kernel driver exposes its chips.
TENSTORRENT_DEVICE_DIR = Path("/dev/tenstorrent")


def blackhole_status() -> tuple[bool, str]:
    """Whether a Tenstorrent chip and a ttnn build are both present, and why not."""
    chips = sorted(TENSTORRENT_DEVICE_DIR.glob("*")) if TENSTORRENT_DEVICE_DIR.is_dir() else []
    if not chips:
        return False, f"no Tenstorrent device under {TENSTORRENT_DEVICE_DIR}"
    if importlib.util.find_spec("ttnn") is None:
        hint = "activate tt-metal's python_env"
        return False, f"{len(chips)} Tenstorrent device(s) found but ttnn is not importable ({hint})"
    return True, f"{len(chips)} Tenstorrent device(s) and ttnn found"


def is_chip_id(device: str | None) -> bool:
    """Whether ``device`` names a Tenstorrent chip: a bare non-negative integer ('0', '1').

    No torch device is spelled that way (torch wants cpu, cuda, cuda:N), so the spelling alone
    says which engine the user means.
    """
    return device is not None and device.strip().isdigit()


def chip_id(device: str | None) -> int:
    """The ttnn engine's chip from the ``device`` setting; empty or auto: chip 0.

    Raises:
        EngineError: ``device`` is neither empty nor a chip id.
    """
    if device in (None, "", "auto"):
        return 0
    if not is_chip_id(device):
        raise EngineError(
            f"engine ttnn: device {device!r} is not a chip id; write 0, 1, ... (the chip to open) "
            "or leave it empty for chip 0"
        )
    return int(device)


def chip_count() -> int:
    """How many Tenstorrent chips ttnn sees (its ``GetNumAvailableDevices``); opens none.

    Raises:
        EngineError: ttnn cannot be imported.
    """
    from tt_sam3_ros.engines.ttnn_model.device import load_ttnn

    return int(load_ttnn().GetNumAvailableDevices())


def choose_engine(requested: str, device: str | None) -> tuple[str, str]:
    """Resolve ``auto`` to a concrete engine name; returns (name, reason in words)."""
    if requested not in ENGINE_NAMES:
        raise EngineError(f"unknown engine {requested!r}; choose one of {', '.join(ENGINE_NAMES)}")
    if requested != "auto":
        return requested, "requested explicitly"
    if is_chip_id(device):
        # The user named a chip: running torch on the CPU instead would hide that it is missing.
        usable, why = blackhole_status()
        if not usable:
            raise EngineError(
                f"device {device!r} is a Tenstorrent chip id, but {why}; for the torch engine "
                "set device to cpu or cuda:N, or leave it empty to let auto choose"
            )
        return "ttnn", f"device {device!r} is a Tenstorrent chip id; {why}"
    if device not in (None, "", "auto"):
        return "torch", f"device {device!r} requested, which the torch engine serves"
    usable, why = blackhole_status()
    if usable:
        return "ttnn", why
    import torch

    if torch.cuda.is_available():
        return "torch", f"{why}; CUDA device {torch.cuda.get_device_name(0)} found"
    return "torch", f"{why}; no CUDA device; running on the CPU"


def create_engine(
    requested: str,
    model: Any,
    tokenizer: Any,
    device: str | None = None,
    dtype: str | None = None,
    ttnn_options: dict[str, Any] | None = None,
    max_prompts: int = MAX_PROMPTS,
    max_instances: int | None = None,
    chips: Any = None,
) -> Engine:
    """Build the engine ``requested`` ('auto', 'torch', 'ttnn') around a loaded Sam3Model.

    ``ttnn_options`` (names in TTNN_OPTIONS; None values mean the engine's default, except
    prompt_path: DEFAULT_TTNN_PROMPT_PATH) go to the ttnn engine; the torch engine has no use for
    them, and says so once when any is set.
    ``max_prompts``: the most prompts one frame will carry; the ttnn engine sizes its chip prompt
    path's traces for it (the torch engine takes any count up to MAX_PROMPTS). ``max_instances``:
    the most instances a call will ask for; the ttnn engine's chip prompt path keeps that many
    queries per prompt on the chip (None: its default), the torch engine returns any count.
    ``chips``: with one ttnn engine per chip in one process, the ``BlackholeChips`` they share
    (ttnn_engine.TtnnEngine, its ``chips`` argument); None: the engine opens its chip alone.
    """
    options = {key: value for key, value in (ttnn_options or {}).items() if value not in (None, "")}
    unknown = sorted(set(options) - set(TTNN_OPTIONS))
    if unknown:
        raise EngineError(f"unknown ttnn option(s) {unknown}; known: {', '.join(TTNN_OPTIONS)}")
    name, reason = choose_engine(requested, device)
    LOG.info("engine %s chosen: %s", name, reason)
    if name != "ttnn" and options:
        LOG.warning("ttnn engine options %s are ignored: the %s engine runs", sorted(options), name)
    if name == "ttnn":
        device_id = chip_id(device)
        try:
            from tt_sam3_ros.engines.ttnn_engine import TtnnEngine
        except ImportError as error:
            raise EngineError(f"the ttnn engine cannot be loaded: {error}") from error
        sizes = {"max_prompts": max_prompts, "max_instances": max_instances}
        options.setdefault("prompt_path", DEFAULT_TTNN_PROMPT_PATH)
        return TtnnEngine(model, tokenizer, device_id, dtype, chips=chips, **sizes, **options)
    from tt_sam3_ros.engines.torch_engine import TorchEngine

    return TorchEngine(model, tokenizer, device=device, dtype=dtype)


def torch_device(device: str | None) -> Any:
    """The torch device the torch engine runs on for ``device``: cpu, cuda or cuda:N; None, ''
    or 'auto': CUDA when torch sees one, else the CPU. For what runs in PyTorch beside the
    engines (SAM 3's video tracker), so that it goes where the torch engine would.

    Raises:
        EngineError: CUDA requested and torch sees none.
    """
    from tt_sam3_ros.engines.torch_engine import resolve_device

    return resolve_device(device)
