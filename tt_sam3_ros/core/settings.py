"""The node's settings as plain data, and the rules that make a set of parameter values unusable.

ROS declares the parameters (``tt_sam3_ros.ros.parameters``: names, types, ranges, when each may
change); what a set of values must satisfy, and the settings the worker reads from valid values,
need no ROS and are kept here, where the library's own limits are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tt_sam3_ros.core.class_ids import BOX_ONLY_CLASS_ID
from tt_sam3_ros.core.depth import DepthLimits
from tt_sam3_ros.core.depth_pairing import DepthSettings
from tt_sam3_ros.core.errors import InputError, quoted
from tt_sam3_ros.core.prompts import check_max_prompts, validate_prompts
from tt_sam3_ros.core.segmenter import DEFAULT_MAX_INSTANCES, DEFAULT_THRESHOLD, THRESHOLD_RANGE
from tt_sam3_ros.core.tracking import (
    DEFAULT_MAX_AGE_FRAMES,
    DEFAULT_MAX_AGE_S,
    DEFAULT_MIN_IOU,
    check_tracking_settings,
)
from tt_sam3_ros.core.video_tracker import SAM3_TRACKER_ENGINES, TRACKERS, sam3_tracker_problem
from tt_sam3_ros.engines import ENGINE_NAMES, TTNN_DTYPE_NAMES, TTNN_PROMPT_PATHS

#: How images arrive: sensor_msgs/Image or sensor_msgs/CompressedImage.
TRANSPORTS = ("raw", "compressed")
#: Most cameras one node serves: each adds a subscription, five publishers and a status.
MAX_CAMERAS = 16
#: Most chips one node drives (a Galaxy holds 32).
MAX_DEVICES = 32
#: The ``devices`` value that means every chip ttnn sees.
ALL_DEVICES = "all"
#: A camera name is one ROS name token: it becomes part of topic names (front/image, ~/front/masks).
CAMERA_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
#: Said when prompts exceed max_prompts: the limit sized the engine at configure.
MAX_PROMPTS_HINT = (
    " (max_prompts, read at configure: deactivate and clean up the node, set max_prompts, then configure)"
)
#: The QoS reliabilities a subscription may ask for (``qos_reliability``).
RELIABILITY_NAMES = ("best_effort", "reliable")
TRACK_MAX_AGE_RANGE = (0.01, 3600.0)
TRACK_MAX_AGE_FRAMES_RANGE = (1, 1000)
TRACK_MIN_IOU_RANGE = (0.01, 1.0)


@dataclass(frozen=True)
class RunSettings:
    """What the worker reads at the start of each frame; replaced whole, never mutated."""

    prompts: tuple[str, ...] = ()
    threshold: float = DEFAULT_THRESHOLD
    max_instances: int = DEFAULT_MAX_INSTANCES
    publish_overlay: bool = True
    depth: DepthSettings = field(default_factory=DepthSettings)
    tracking: bool = True
    track_max_age_s: float = DEFAULT_MAX_AGE_S
    track_max_age_frames: int = DEFAULT_MAX_AGE_FRAMES
    track_min_iou: float = DEFAULT_MIN_IOU
    #: (prompt, class id) for each prompt in force: the ids ObjectHypothesis.class_id and
    #: LabelInfo carry (``ClassIds``); empty until the node assigns them.
    class_ids: tuple[tuple[str, int], ...] = ()
    #: The class id of the box-only concept (exemplar boxes without a prompt).
    box_only_class_id: int = BOX_ONLY_CLASS_ID


def settings_from(values: dict[str, Any]) -> RunSettings:
    """The worker's settings from valid parameter values (``invalid_values`` returned '')."""
    prompts = values["prompts"]
    return RunSettings(
        prompts=tuple(validate_prompts(prompts, values["max_prompts"], exact=True)) if prompts else (),
        threshold=float(values["threshold"]),
        max_instances=int(values["max_instances"]),
        publish_overlay=bool(values["publish_overlay"]),
        depth=DepthSettings(
            limits=depth_limits(values),
            max_skew_s=float(values["depth_max_skew_s"]),
            points_stride=int(values["points_stride"]),
        ),
        tracking=bool(values["tracking"]),
        track_max_age_s=float(values["track_max_age_s"]),
        track_max_age_frames=int(values["track_max_age_frames"]),
        track_min_iou=float(values["track_min_iou"]),
    )


def invalid_values(values: dict[str, Any], prompts_required: bool = False) -> str:
    """Why this combination of parameter values is unusable ('' when it is fine)."""
    prompts = values["prompts"]
    try:
        max_prompts = check_max_prompts(values["max_prompts"])
    except InputError as error:
        return str(error)
    if prompts is not None or prompts_required:
        try:
            validate_prompts(prompts if prompts is not None else [], max_prompts=max_prompts, exact=True)
        except ValueError as error:
            hint = MAX_PROMPTS_HINT if "too many prompts" in str(error) else ""
            return f"prompts rejected: {error}{hint}"
    low, high = THRESHOLD_RANGE
    if not low <= values["threshold"] <= high:
        return f"threshold must be in [{low:g}, {high:g}], got {values['threshold']}"
    try:
        check_tracking_settings(
            values["track_max_age_s"], values["track_min_iou"], values["track_max_age_frames"]
        )
    except InputError as error:
        return str(error)
    if values["tracker"] == "sam3" and values["engine"] not in SAM3_TRACKER_ENGINES:
        return (
            f"tracker 'sam3' cannot run on the {values['engine']} engine: SAM 3's video tracker runs in "
            "PyTorch only; set engine to torch, or tracker to association"
        )
    if values["tracker"] == "sam3" and (problem := sam3_tracker_problem(values["device"], values["dtype"])):
        return problem
    for name, choices in (
        ("engine", ENGINE_NAMES),
        ("tracker", TRACKERS),
        ("ttnn_weight_dtype", TTNN_DTYPE_NAMES),
        ("ttnn_param_dtype", TTNN_DTYPE_NAMES),
        ("ttnn_prompt_path", TTNN_PROMPT_PATHS),
        ("transport", TRANSPORTS),
        ("qos_reliability", RELIABILITY_NAMES),
    ):
        if values[name] not in choices:
            return f"{name} must be one of {', '.join(choices)}; got {quoted(values[name])}"
    try:
        depth_limits(values)
        camera_names(values.get("cameras"))
        devices = device_names(values.get("devices"))
    except InputError as error:
        return str(error)
    if devices and (values["engine"] == "torch" or values["tracker"] == "sam3"):
        return (
            "devices names Tenstorrent chips, which the ttnn engine drives; the torch engine (and tracker "
            "'sam3') runs on the one device 'device' names: set engine to ttnn or auto, or leave devices "
            "unset"
        )
    if devices and values["device"]:
        return (
            f"set devices or device, not both (device {quoted(values['device'])}, devices "
            f"[{', '.join(devices)}]): devices names every chip to serve on; leave device empty"
        )
    return ""


def camera_names(cameras: list[str] | None) -> tuple[str, ...]:
    """The ``cameras`` parameter checked: distinct ROS name tokens; () when unset or empty.

    Raises:
        InputError: naming the offending entry (quoted: it is untrusted text).
    """
    names = tuple(cameras or ())
    if len(names) > MAX_CAMERAS:
        raise InputError(f"cameras: at most {MAX_CAMERAS} cameras, got {len(names)}")
    for name in names:
        if not CAMERA_NAME.fullmatch(name):
            raise InputError(
                f"cameras: {quoted(name)} is not a camera name (a letter, then up to 63 letters, "
                "digits or '_')"
            )
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise InputError(f"cameras: {quoted(duplicates[0])} is named twice")
    return names


def device_names(devices: list[str] | None) -> tuple[str, ...]:
    """The ``devices`` parameter checked: distinct chip ids ('0', '1', ...) or ('all',); () when
    unset or empty.

    Raises:
        InputError: naming the offending entry (quoted: it is untrusted text).
    """
    names = tuple(name.strip() for name in devices or ())
    if ALL_DEVICES in names and len(names) > 1:
        raise InputError(
            f"devices: '{ALL_DEVICES}' stands alone (every chip ttnn sees); got {len(names)} entries"
        )
    if len(names) > MAX_DEVICES:
        raise InputError(f"devices: at most {MAX_DEVICES} chips, got {len(names)}")
    for name in names:
        if name != ALL_DEVICES and not (name.isascii() and name.isdigit()):
            raise InputError(f"devices: {quoted(name)} is not a chip id (0, 1, ...) nor '{ALL_DEVICES}'")
    ids = [str(int(name)) if name != ALL_DEVICES else name for name in names]
    duplicates = sorted({name for name in ids if ids.count(name) > 1})
    if duplicates:
        raise InputError(f"devices: chip {duplicates[0]} is named twice")
    return tuple(ids)


def depth_limits(values: dict[str, Any]) -> DepthLimits:
    """The depth validity limits from parameter values (raises InputError with the reason)."""
    return DepthLimits(
        min_m=float(values["depth_min_m"]),
        max_m=float(values["depth_max_m"]),
        min_points=int(values["depth_min_points"]),
    )
