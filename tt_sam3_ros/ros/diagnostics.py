"""The node's /diagnostics status: one DiagnosticStatus from a stream's counters and the node's state.

Kept apart from the node so the level rules and the key names (a contract: README's diagnostics
table) live in one place and can be checked without a ROS graph. One call builds the status of
one input stream: a node with ``cameras`` publishes the engine's (every camera's frames
together) and one ``camera_status`` per camera; a node with ``devices`` one ``chip_status`` per
chip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus, KeyValue

from tt_sam3_ros.core.tracking import AgeingView
from tt_sam3_ros.runtime.chips import OUT_OF_SERVICE, SERVING, ChipSnapshot
from tt_sam3_ros.runtime.worker import StatsSnapshot


def no_prompts_hint(node: str) -> str:
    """What the WARN status says while no prompts are set: the command that fixes it, for
    ``node``, the node's fully qualified name (a namespace or a renamed node included)."""
    return f"no prompts set: ros2 param set {node} prompts \"['car']\""


@dataclass(frozen=True)
class NodeView:
    """What the status reports besides the counters: the state and what runs."""

    name: str
    state: str
    engine: str
    device: str
    dtype: str
    model: str
    prompts: tuple[str, ...]
    #: The node's fully qualified name (``/robot/sam3``), which commands in hints must use.
    fully_qualified_name: str = ""
    #: Which prompt path serves and why (the ttnn engine's; empty for the torch engine).
    prompt_path: str = ""
    #: How frames go up and why (the ttnn engine's warm-up check; empty for the torch engine).
    input_path: str = ""
    #: With ``devices``: the chips and which of them serve, e.g. "0, 1 (serving: 0)".
    devices: str = ""
    #: (stage, the form that serves and why) of the ttnn engine's other warm-up checks
    #: (engines.CHECKED_STAGES); empty for the torch engine.
    stage_checks: tuple[tuple[str, str], ...] = ()


def health(view: NodeView, stats: StatsSnapshot) -> tuple[bytes, str]:
    """Level and one-line summary: ERROR while the last frame failed in the engine or its outputs."""
    if stats.last_outcome in ("engine_error", "output_error"):
        return DiagnosticStatus.ERROR, stats.last_error
    if view.state != "active":
        return DiagnosticStatus.WARN, f"{view.state}: not segmenting"
    if not view.prompts:
        return DiagnosticStatus.WARN, no_prompts_hint(view.fully_qualified_name or f"/{view.name}")
    if stats.last_outcome == "rejected":
        return DiagnosticStatus.WARN, stats.last_error
    return DiagnosticStatus.OK, "segmenting"


def segmentation_status(view: NodeView, stats: StatsSnapshot) -> DiagnosticStatus:
    """The ``<node>: segmentation`` status: level, summary and every value of README's table."""
    values = {
        "state": view.state,
        "engine": view.engine,
        "device": view.device,
        "dtype": view.dtype,
        "model": view.model,
        **({"input": view.input_path} if view.input_path else {}),
        **dict(view.stage_checks),
        **({"prompt_path": view.prompt_path} if view.prompt_path else {}),
        "prompts": ", ".join(view.prompts),
        **({"devices": view.devices} if view.devices else {}),
        **_frame_values(stats),
    }
    return _status(view, f"{view.name}: segmentation", stats, values)


def chip_status(view: NodeView, chip: ChipSnapshot) -> DiagnosticStatus:
    """The ``<node>: chip <id>`` status of a node with ``devices``: the frames that chip served.

    ERROR while the chip is out of service (the message is why: it could not start, or its
    engine failed frames in a row), the last frame's rules otherwise; WARN while it starts or
    after it was released.
    """
    values = {
        "chip": chip.name,
        "state": chip.state,
        "device": chip.description.get("device", ""),
        "frames_processed": str(chip.stats.processed),
        "frames_rejected": str(chip.stats.rejected),
        "engine_errors": str(chip.stats.engine_errors),
        "output_errors": str(chip.stats.output_errors),
        **percentiles("processing_ms", chip.stats.processing_ms),
        **percentiles("output_age_ms", chip.stats.output_age_ms),
        "last_error": chip.stats.last_error,
        "out_of_service_reason": chip.reason if chip.state == OUT_OF_SERVICE else "",
    }
    if chip.state == OUT_OF_SERVICE:
        level, message = DiagnosticStatus.ERROR, f"out of service: {chip.reason}"
    elif chip.state != SERVING:
        level, message = DiagnosticStatus.WARN, chip.state
    else:
        level, message = health(view, chip.stats)
    return DiagnosticStatus(
        level=level,
        name=f"{view.name}: chip {chip.name}",
        message=message,
        hardware_id=values["device"] or f"chip {chip.name}",
        values=[KeyValue(key=key, value=value) for key, value in values.items()],
    )


def camera_status(view: NodeView, camera: str, stats: StatsSnapshot) -> DiagnosticStatus:
    """The ``<node>: camera <name>`` status of a node with ``cameras``: that camera's frames alone.

    Same level rules as the engine's status, judged on this camera's last frame, so a camera
    sending bad frames shows WARN while the others stay OK.
    """
    return _status(view, f"{view.name}: camera {camera}", stats, {"camera": camera, **_frame_values(stats)})


def _frame_values(stats: StatsSnapshot) -> dict[str, str]:
    """The counters, recent timings and last error of one stream, as KeyValue strings."""
    return {
        "frames_received": str(stats.received),
        "frames_processed": str(stats.processed),
        "frames_dropped": str(stats.dropped),
        "frames_rejected": str(stats.rejected),
        "engine_errors": str(stats.engine_errors),
        "output_errors": str(stats.output_errors),
        **percentiles("processing_ms", stats.processing_ms),
        **percentiles("output_age_ms", stats.output_age_ms),
        "last_error": stats.last_error,
    }


def _status(view: NodeView, name: str, stats: StatsSnapshot, values: dict[str, str]) -> DiagnosticStatus:
    level, message = health(view, stats)
    return DiagnosticStatus(
        level=level,
        name=name,
        message=message,
        hardware_id=view.device,
        values=[KeyValue(key=key, value=value) for key, value in values.items()],
    )


def percentiles(name: str, samples: Sequence[float]) -> dict[str, str]:
    """p50, p90 and max of the recent window, in milliseconds, as strings for KeyValue."""
    if not samples:
        return {f"{name}_p50": "", f"{name}_p90": "", f"{name}_max": ""}
    p50, p90 = np.percentile(samples, [50, 90])
    return {f"{name}_p50": f"{p50:.1f}", f"{name}_p90": f"{p90:.1f}", f"{name}_max": f"{max(samples):.1f}"}


def depth_status(name: str, values: dict[str, str]) -> DiagnosticStatus:
    """The ``<name>: depth`` status from ``DepthStats.snapshot()``: WARN while the last frame got
    no 3D answer, with its reason."""
    values = dict(values)
    outcome = values.pop("last_outcome", "none")
    if outcome in ("without_depth", "rejected"):
        level, message = DiagnosticStatus.WARN, values.get("last_error", "")
    elif outcome == "none":
        level, message = DiagnosticStatus.OK, "waiting for a frame"
    else:
        level, message = DiagnosticStatus.OK, "3D from depth"
    return DiagnosticStatus(
        level=level,
        name=f"{name}: depth",
        message=message,
        values=[KeyValue(key=key, value=value) for key, value in values.items()],
    )


def tracking_status(name: str, view: AgeingView) -> DiagnosticStatus:
    """The ``<name>: tracking`` status of one camera's tracker: WARN while its processed frames
    are further apart than ``track_max_age_s`` (ageing then counts frames; see the message)."""
    interval = view.processed_interval_s
    values = {
        "processed_interval_s": "" if interval is None else f"{interval:.3f}",
        "track_max_age_s": f"{view.max_age_s:g}",
        "track_max_age_frames": str(view.max_age_frames),
        "tracks_alive": str(view.tracks_alive),
    }
    if view.warning:
        level, message = DiagnosticStatus.WARN, view.warning
    else:
        level, message = DiagnosticStatus.OK, "tracking" if interval is not None else "waiting for frames"
    return DiagnosticStatus(
        level=level,
        name=f"{name}: tracking",
        message=message,
        values=[KeyValue(key=key, value=value) for key, value in values.items()],
    )
