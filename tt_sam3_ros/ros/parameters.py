"""The /sam3 node's parameters: the table, when each may change, and what makes a set unusable.

Kept apart from the node so the table can be read (and tested) without a ROS graph, and so a
new output or camera adds its parameters here, next to the rules that check them. The values
the library shares (engine names, instance and prompt limits, defaults) are imported from their
one home, never written again here.
"""

from __future__ import annotations

from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.parameter import Parameter
from rclpy.qos import ReliabilityPolicy

from tt_sam3_ros.core.errors import quoted
from tt_sam3_ros.core.preprocess import DEFAULT_MAX_IMAGE_SIDE
from tt_sam3_ros.core.prompts import MAX_PROMPT_CHARS, MAX_PROMPTS
from tt_sam3_ros.core.results import MAX_LABELLED_INSTANCES
from tt_sam3_ros.core.segmenter import DEFAULT_MAX_INSTANCES, DEFAULT_THRESHOLD, THRESHOLD_RANGE
from tt_sam3_ros.core.settings import (
    MAX_CAMERAS,
    MAX_DEVICES,
    RELIABILITY_NAMES,
    TRACK_MAX_AGE_FRAMES_RANGE,
    TRACK_MAX_AGE_RANGE,
    TRACK_MIN_IOU_RANGE,
    TRANSPORTS,
)
from tt_sam3_ros.core.tracking import (
    DEFAULT_MAX_AGE_FRAMES,
    DEFAULT_MAX_AGE_S,
    DEFAULT_MIN_IOU,
)
from tt_sam3_ros.core.video_tracker import TRACKERS
from tt_sam3_ros.engines import (
    DEFAULT_TTNN_PROMPT_PATH,
    ENGINE_NAMES,
    TTNN_DTYPE_NAMES,
    TTNN_OPTIONS,
    TTNN_PROMPT_PATHS,
)
from tt_sam3_ros.weights.release import DEFAULT_MODEL_ID
from tt_sam3_ros.weights.tiny_model import TINY_MODEL_ID

RELIABILITIES = dict(
    zip(RELIABILITY_NAMES, (ReliabilityPolicy.BEST_EFFORT, ReliabilityPolicy.RELIABLE), strict=True)
)

# When each parameter may change. Dynamic ones apply from the next processed frame.
DYNAMIC = (
    "prompts",
    "threshold",
    "max_instances",
    "publish_overlay",
    "depth_max_skew_s",
    "depth_min_points",
    "depth_min_m",
    "depth_max_m",
    "points_stride",
    "tracking",
    "track_max_age_s",
    "track_max_age_frames",
    "track_min_iou",
)
#: The ranges the descriptors state (the tracker's own check refuses 0 and below for both).
READ_AT_CONFIGURE = (
    "engine",
    "tracker",
    "device",
    "dtype",
    "ttnn_weight_cache",
    "ttnn_weight_dtype",
    "ttnn_param_dtype",
    "ttnn_prompt_path",
    "max_prompts",
    "model_id",
    "revision",
    "weights_dir",
    "max_image_side",
    "cameras",
    "devices",
)
READ_AT_ACTIVATE = ("transport", "qos_reliability", "qos_depth", "depth")


def _describe(text: str, **extra: Any) -> ParameterDescriptor:
    return ParameterDescriptor(description=text, **extra)


def _int_range(low: int, high: int) -> list[IntegerRange]:
    return [IntegerRange(from_value=low, to_value=high, step=1)]


#: name -> (default, descriptor). ``prompts`` has no default: the node waits for them.
PARAMETERS: dict[str, tuple[Any, ParameterDescriptor]] = {
    "prompts": (
        Parameter.Type.STRING_ARRAY,
        _describe(
            f"Texts to segment, e.g. ['car', 'person']: 1 to max_prompts non-blank strings of at most "
            f"{MAX_PROMPT_CHARS} characters. Applies from the next frame. Unset: the node waits.",
            additional_constraints=f"1..max_prompts non-blank strings of at most {MAX_PROMPT_CHARS} chars",
        ),
    ),
    "threshold": (
        DEFAULT_THRESHOLD,
        _describe(
            "Keep instances whose score (sigmoid(logit) * sigmoid(presence)) is above this; "
            "0 to 1, both included (1 keeps none).",
            floating_point_range=[
                FloatingPointRange(from_value=THRESHOLD_RANGE[0], to_value=THRESHOLD_RANGE[1], step=0.0)
            ],
        ),
    ),
    "max_instances": (
        DEFAULT_MAX_INSTANCES,
        _describe(
            f"Most instances published per frame, best first (a mono8 mask holds {MAX_LABELLED_INSTANCES}).",
            integer_range=_int_range(1, MAX_LABELLED_INSTANCES),
        ),
    ),
    "max_prompts": (
        MAX_PROMPTS,
        _describe(
            "Most prompts accepted in 'prompts'; each prompt adds decoder work to every frame. The ttnn "
            "engine's chip prompt path compiles one trace per bucket 1, 2, 4, ... up to it, so a robot "
            "with few prompts starts faster with a small value. Read at configure.",
            integer_range=_int_range(1, MAX_PROMPTS),
        ),
    ),
    "publish_overlay": (True, _describe("Draw ~/overlay (rgb8) while someone subscribes to it.")),
    "tracking": (
        True,
        _describe(
            "Give each detection a track id kept from frame to frame (Detection2D.id); false: ids are "
            "the detections' positions 1..N. A frame served with it off ends every track."
        ),
    ),
    "tracker": (
        "association",
        _describe(
            "How ids are kept: 'association' detects on every frame and matches detections to tracks by "
            "masks and motion (fast, no memory); 'sam3' runs SAM 3's own video tracker, one session per "
            "camera with a memory of past frames per object, so an object keeps its id and mask through a "
            "missed detection or an occlusion (more compute per object; torch engine only). "
            "Read at configure.",
            additional_constraints=f"one of: {', '.join(TRACKERS)}",
        ),
    ),
    "track_max_age_s": (
        DEFAULT_MAX_AGE_S,
        _describe(
            "Seconds (image stamps) a track survives without a matching detection, at least; it ends once "
            "it has also gone unmatched in track_max_age_frames frames of its camera. Ids are never reused.",
            floating_point_range=[
                FloatingPointRange(
                    from_value=TRACK_MAX_AGE_RANGE[0], to_value=TRACK_MAX_AGE_RANGE[1], step=0.0
                )
            ],
        ),
    ),
    "track_max_age_frames": (
        DEFAULT_MAX_AGE_FRAMES,
        _describe(
            "Processed frames of its camera a track survives without a matching detection, at least; it "
            "ends once it has also gone unmatched for track_max_age_s. Keeps ids on slow engines, whose "
            "frames come further apart than track_max_age_s.",
            integer_range=_int_range(*TRACK_MAX_AGE_FRAMES_RANGE),
        ),
    ),
    "track_min_iou": (
        DEFAULT_MIN_IOU,
        _describe(
            "Least mask IoU between a detection and a track's motion-predicted mask for it to continue "
            "that track (same prompt only).",
            floating_point_range=[
                FloatingPointRange(
                    from_value=TRACK_MIN_IOU_RANGE[0], to_value=TRACK_MIN_IOU_RANGE[1], step=0.0
                )
            ],
        ),
    ),
    "engine": (
        "auto",
        _describe(
            "auto, torch or ttnn. auto: ttnn when a Tenstorrent device is present, else torch; a device "
            "set to a chip id means ttnn, to cpu or cuda torch. "
            "Read at configure.",
            additional_constraints="one of: " + ", ".join(ENGINE_NAMES),
        ),
    ),
    "device": (
        "",
        _describe(
            "Engine device: cpu, cuda or cuda:N for torch; a chip id 0, 1, ... for ttnn (with engine "
            "auto, a chip id picks ttnn and fails when no chip is usable; cpu or cuda picks torch); "
            "empty: the engine's default (auto: its own choice; ttnn: chip 0). Read at configure."
        ),
    ),
    "dtype": ("", _describe("Compute dtype, e.g. float32 or bfloat16; empty: the engine's default.")),
    "ttnn_weight_cache": (
        "",
        _describe(
            "ttnn engine: folder for its converted weights, so a restart skips the conversion; "
            "empty: no cache. Read at configure."
        ),
    ),
    "ttnn_weight_dtype": (
        "bfloat8_b",
        _describe(
            "ttnn engine: device dtype of the matmul weights. Read at configure.",
            additional_constraints="one of: " + ", ".join(TTNN_DTYPE_NAMES),
        ),
    ),
    "ttnn_param_dtype": (
        "bfloat16",
        _describe(
            "ttnn engine: device dtype of norms, biases and position terms. Read at configure.",
            additional_constraints="one of: " + ", ".join(TTNN_DTYPE_NAMES),
        ),
    ),
    "ttnn_prompt_path": (
        DEFAULT_TTNN_PROMPT_PATH,
        _describe(
            "ttnn engine: where the prompt path runs: auto (the chip's when its warm-up check passes: mask "
            "logits of one frame at PCC >= 0.99 against the host path; else the host's, with the reason in "
            "the log and on /diagnostics as prompt_path), host (the CPU, the torch engine's modules) or chip "
            "(a second trace on the p150a, nothing read back between the traces; verified off-chip only). "
            "Read at configure.",
            additional_constraints="one of: " + ", ".join(TTNN_PROMPT_PATHS),
        ),
    ),
    "model_id": (
        DEFAULT_MODEL_ID,
        _describe(
            f"Hugging Face model id, a local folder or file (transformers format or Meta's sam3.pt), or "
            f"'{TINY_MODEL_ID}' (offline random weights, meaningless output). Read at configure."
        ),
    ),
    "revision": (
        "",
        _describe("Hub revision (branch, tag or commit); empty: the commit pinned for facebook/sam3."),
    ),
    "weights_dir": ("", _describe("Local folder with the weights; empty: the Hugging Face cache or hub.")),
    "max_image_side": (
        DEFAULT_MAX_IMAGE_SIDE,
        _describe(
            "Input images with a longer side are rejected (bounds host memory per frame).",
            integer_range=_int_range(16, 32768),
        ),
    ),
    "transport": (
        "raw",
        _describe(
            "raw: subscribe to 'image' (sensor_msgs/Image); compressed: to 'image/compressed' "
            "(sensor_msgs/CompressedImage, JPEG or PNG). Read at activate.",
            additional_constraints="one of: " + ", ".join(TRANSPORTS),
        ),
    ),
    "qos_reliability": (
        "best_effort",
        _describe(
            "Input reliability: best_effort (matches every publisher) or reliable. Read at activate.",
            additional_constraints="one of: " + ", ".join(RELIABILITIES),
        ),
    ),
    "qos_depth": (
        1,
        _describe(
            "Input queue depth; 1 keeps only the newest frame. Read at activate.",
            integer_range=_int_range(1, 100),
        ),
    ),
    "depth": (
        False,
        _describe(
            "Subscribe to 'depth' (16UC1 mm or 32FC1 m, registered to the colour image) and "
            "'camera_info' and publish ~/detections_3d and ~/points (false: those topics do not exist). "
            "Read at activate."
        ),
    ),
    "depth_max_skew_s": (
        0.02,
        _describe(
            "Most seconds between a colour frame's stamp and its depth frame's; further apart, "
            "the frame is answered in 2D only.",
            floating_point_range=[FloatingPointRange(from_value=0.0, to_value=1.0, step=0.0)],
        ),
    ),
    "depth_min_points": (
        20,
        _describe(
            "Fewest valid depth points an instance needs for a Detection3D.",
            integer_range=_int_range(1, 1_000_000),
        ),
    ),
    "depth_min_m": (
        0.1,
        _describe(
            "Nearest valid depth in metres (0 itself always means 'no reading').",
            floating_point_range=[FloatingPointRange(from_value=0.0, to_value=100.0, step=0.0)],
        ),
    ),
    "depth_max_m": (
        10.0,
        _describe(
            "Farthest valid depth in metres; above depth_min_m.",
            floating_point_range=[FloatingPointRange(from_value=0.0, to_value=1000.0, step=0.0)],
        ),
    ),
    "points_stride": (
        4,
        _describe(
            "~/points holds every points_stride-th pixel of every row and column that has an instance "
            "and valid depth.",
            integer_range=_int_range(1, 64),
        ),
    ),
    "cameras": (
        Parameter.Type.STRING_ARRAY,
        _describe(
            "Camera names, e.g. ['front', 'left']: the node reads <camera>/image (and <camera>/depth, "
            "<camera>/camera_info) and publishes ~/<camera>/detections, ~/<camera>/masks, ... and "
            "~/<camera>/label_info per camera, "
            "serving them in turn. Unset or empty: one camera on 'image'. Read at configure.",
            additional_constraints=f"at most {MAX_CAMERAS} distinct names, letters, digits and '_', "
            "starting with a letter",
        ),
    ),
    "devices": (
        Parameter.Type.STRING_ARRAY,
        _describe(
            "Tenstorrent chips to serve on, one engine each, e.g. [0, 1], or all (every chip ttnn "
            "sees): each free chip takes the next camera's newest frame, a camera's outputs leave in "
            "the order its frames came, and a chip that fails is taken out of service while the others "
            "serve every camera (the next configure opens it again). Unset or empty: the one device "
            "'device' names. Needs the ttnn engine (engine ttnn or auto; leave device empty). "
            "Read at configure.",
            additional_constraints=f"distinct chip ids 0, 1, ... (at most {MAX_DEVICES}), or all",
        ),
    ),
    "autostart": (
        True,
        _describe("Configure and activate at start; false waits for lifecycle transitions.", read_only=True),
    ),
}


#: Each parameter's ROS type, for the type check (the node declares them dynamically typed so
#: that a wrong type gets this module's refusal, not rclpy's "expected '9' got '6'").
TYPES: dict[str, Parameter.Type] = {
    name: default if isinstance(default, Parameter.Type) else Parameter.Type.from_parameter_value(default)
    for name, (default, _) in PARAMETERS.items()
}
_EMPTY_ARRAYS = {
    Parameter.Type.BYTE_ARRAY,
    Parameter.Type.BOOL_ARRAY,
    Parameter.Type.INTEGER_ARRAY,
    Parameter.Type.DOUBLE_ARRAY,
    Parameter.Type.STRING_ARRAY,
}


def _example(name: str) -> str:
    default = PARAMETERS[name][0]
    if name == "prompts":
        return "['car', 'person']"
    if name == "cameras":
        return "['front', 'left']"
    if name == "devices":
        return "[0, 1]"
    if isinstance(default, bool):
        return "true"
    if isinstance(default, str):
        return f"'{default}'" if default else "''"
    return str(default)


#: How ``devices`` may be written besides a list of strings: ``-p devices:="[0, 1]"`` (integers)
#: and ``-p devices:=all`` (one string).
_DEVICES_SPELLINGS = (Parameter.Type.INTEGER_ARRAY, Parameter.Type.STRING)


def coerced(parameter: Parameter) -> Parameter:
    """An integer given for a double parameter, as that double (``-p threshold:=0`` means 0.0);
    ``devices`` written as integers or as one string, as the list of strings it means.

    Any other parameter is returned unchanged; ``wrong_type`` judges it.
    """
    if (
        parameter.name in TYPES
        and TYPES[parameter.name] == Parameter.Type.DOUBLE
        and parameter.type_ == Parameter.Type.INTEGER
    ):
        return Parameter(parameter.name, Parameter.Type.DOUBLE, float(parameter.value))
    if parameter.name == "devices" and parameter.type_ in _DEVICES_SPELLINGS:
        values = [parameter.value] if parameter.type_ == Parameter.Type.STRING else parameter.value
        return Parameter("devices", Parameter.Type.STRING_ARRAY, [str(value) for value in values])
    return parameter


def wrong_type(name: str, type_: Parameter.Type, value: Any) -> str:
    """Why a value of ``type_`` cannot be ``name``'s ('' when the type is right), with an example.

    An empty array of any type is left to the value check (``ros2 param set /sam3 prompts "[]"``
    sends a bool array), which says the list must not be empty.
    """
    expected = TYPES.get(name)
    if expected is None or type_ == expected:
        return ""
    if type_ == Parameter.Type.NOT_SET:
        return f"{name} cannot be unset; give a value, e.g. {_example(name)}"
    if expected == Parameter.Type.STRING_ARRAY and type_ in _EMPTY_ARRAYS and len(value) == 0:
        return ""
    if expected == Parameter.Type.DOUBLE and type_ == Parameter.Type.INTEGER:
        return ""
    if name == "devices" and type_ in _DEVICES_SPELLINGS:
        return ""
    what = {
        Parameter.Type.STRING_ARRAY: "a list of strings",
        Parameter.Type.DOUBLE: "a number",
        Parameter.Type.INTEGER: "an integer",
        Parameter.Type.STRING: "a string",
    }
    if expected == Parameter.Type.BOOL:
        needed = f"{name} must be true or false"
    else:
        needed = f"{name} must be {what[expected]}, e.g. {_example(name)}"
    got = f"got {_type_words(type_)} {quoted(value)}"
    if expected == Parameter.Type.STRING_ARRAY and type_ == Parameter.Type.BOOL_ARRAY:
        got += (
            "; YAML reads y, n, yes, no, on and off as booleans: quote such prompts, "
            "e.g. -p \"prompts:=['car', 'y']\""
        )
    return f"{needed}; {got}"


def _type_words(type_: Parameter.Type) -> str:
    return {
        Parameter.Type.BOOL: "a boolean",
        Parameter.Type.INTEGER: "an integer",
        Parameter.Type.DOUBLE: "a number",
        Parameter.Type.STRING: "a string",
        Parameter.Type.BYTE_ARRAY: "a list of bytes",
        Parameter.Type.BOOL_ARRAY: "a list of booleans",
        Parameter.Type.INTEGER_ARRAY: "a list of integers",
        Parameter.Type.DOUBLE_ARRAY: "a list of numbers",
        Parameter.Type.STRING_ARRAY: "a list of strings",
    }.get(type_, str(type_))


def ttnn_options(values: dict[str, Any]) -> dict[str, Any]:
    """The ttnn engine's options for create_engine: a ttnn_* parameter's value, or None at its
    default (create_engine's default then applies: the same value).

    Passing only what the user changed keeps create_engine's "ttnn engine options ignored"
    warning for a user who set one while the torch engine runs.
    """
    options = {}
    for option in TTNN_OPTIONS:
        name = f"ttnn_{option}"
        value = values[name]
        options[option] = None if value in ("", PARAMETERS[name][0]) else value
    return options
