"""Start the /sam3 segmentation node.

    ros2 launch tt_sam3_ros sam3.launch.py image:=/camera/image_raw prompts:="['car', 'person']"

With depth (3D detections and a labelled point cloud):

    ros2 launch tt_sam3_ros sam3.launch.py image:=/camera/color/image_raw depth:=true \
        depth_image:=/camera/aligned_depth_to_color/image_raw camera_info:=/camera/color/camera_info

Two cameras, one node (one engine; each camera has its own outputs, served in turn):

    ros2 launch tt_sam3_ros sam3.launch.py cameras:="['front', 'left']" prompts:=car \
        front_image:=/front/color/image_raw left_image:=/left/color/image_raw

Four chips, eight cameras, one node (one engine per chip; each free chip takes the next
camera's newest frame):

    ros2 launch tt_sam3_ros sam3.launch.py engine:=ttnn devices:="[0, 1, 2, 3]" prompts:="['person']" \
        cameras:="['front', 'rear', 'left', 'right', 'front_left', 'front_right', 'rear_left', 'rear_right']"

Arguments (each optional):
    image        image topic to segment (default: image). With transport:=compressed in the
                 params file the node reads <image>/compressed (JPEG or PNG).
    prompts      texts to segment, a YAML list ("['car', 'person']") or one word (car);
                 empty: the params file's value (none by default: the node waits for
                 ``ros2 param set /sam3 prompts "['car']"``).
    engine       auto, torch or ttnn; empty: the params file's value (auto).
    model_id     Hugging Face model id, a local path, or tiny-random (offline random weights,
                 meaningless output: try the plumbing with model_id:=tiny-random).
    device       engine device: cpu, cuda:0 (torch) or a chip id 0, 1, ... (ttnn; with
                 engine auto a chip id picks ttnn).
    dtype        compute dtype (float32, bfloat16).
    threshold    score threshold, 0 to 1.
                 Each of these four: empty (the default) keeps the params file's value.
    params_file  parameters file (default: this package's config/sam3.yaml).
    namespace    namespace of the node; topics follow it (/<namespace>/sam3/detections).
    devices      Tenstorrent chips to serve on, one engine each: a YAML list of chip ids
                 ("[0, 1, 2, 3]") or all (every chip ttnn sees); empty: the params file's
                 value (none: the one device ``device`` names). Leave device empty.
    cameras      camera names, a YAML list ("['front', 'left']"); empty: the params file's
                 value (none: one camera on ``image``). Each camera reads <camera>/image
                 (<camera>/image/compressed, <camera>/depth, <camera>/camera_info) and
                 publishes /sam3/<camera>/detections, /sam3/<camera>/masks, ...
    depth        true: subscribe to depth and camera_info and publish the 3D outputs;
                 empty: the params file's value (false).
    depth_image  depth topic (registered to the colour image) of the one camera; empty: depth.
    camera_info  CameraInfo topic of the one camera's colour image; empty: camera_info.
    <camera>_image, <camera>_depth, <camera>_camera_info
                 for each camera named in ``cameras`` (on the command line or in the params
                 file), its image, depth and camera_info topics (default <camera>/image,
                 <camera>/depth, <camera>/camera_info). Not declared, so ``ros2 launch
                 --show-args`` omits them; one naming a camera that is not in ``cameras``
                 fails the launch with that camera's name.
    rviz         true: also start rviz2 with this package's config/sam3.rviz (the overlay,
                 the instance mask, and with depth the labelled points coloured by instance
                 and the Detection3DArray; needs the rviz2 and vision_msgs_rviz_plugins
                 packages). Its topics are one camera's in the default namespace.
    rviz_fixed_frame  RViz's fixed frame: the colour camera's optical frame (the images'
                 frame_id), where the 3D outputs are (default camera_color_optical_frame).

The node is a managed (lifecycle) node that configures and activates itself unless the
params file sets ``autostart: false``; then drive it with ``ros2 lifecycle set``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:  # launch and launch_ros come with a ROS 2 install; the logic below needs neither
    from launch import LaunchContext, LaunchDescription
    from launch_ros.actions import LifecycleNode, Node

PACKAGE = "tt_sam3_ros"
NODE_NAME = "sam3"
#: The RViz view installed to share/tt_sam3_ros/config (rviz:=true).
RVIZ_CONFIG = "sam3.rviz"
#: The arguments ``generate_launch_description`` declares (the per-camera ones are not declared).
DECLARED = (
    "image",
    "prompts",
    "engine",
    "model_id",
    "device",
    "dtype",
    "threshold",
    "params_file",
    "namespace",
    "cameras",
    "devices",
    "depth",
    "depth_image",
    "camera_info",
    "rviz",
    "rviz_fixed_frame",
)
#: Seconds ``ros2 launch`` waits after its SIGINT before SIGTERM, then after SIGTERM before
#: SIGKILL (launch's own defaults are 5 and 5). The node answers the first signal by finishing
#: what is in flight (a frame: tens of seconds for the full model on a CPU; a configure phase:
#: the weights, the engine's upload or its warm-up) and then releasing the device; it ignores
#: the later signals, so only SIGKILL can cut that short, leaving the chip open. Two minutes in
#: all cover a CPU frame and the close after it; a first warm-up on a chip with a cold kernel
#: cache can take longer, and is then killed.
SIGTERM_TIMEOUT_S = 60
SIGKILL_TIMEOUT_S = 60
#: Per-camera arguments: ``<camera>_<suffix>`` remaps the node's ``<camera>/<input>``.
CAMERA_INPUTS = {"image": "image", "depth": "depth", "camera_info": "camera_info"}


def prompt_list(text: str) -> list[str]:
    """The prompts launch argument as a list: a YAML list of strings, or one bare word.

    Raises:
        ValueError: anything else, so a typo fails the launch instead of starting a node
            that would refuse the value anyway.
    """
    return name_list(text, "prompts")


def name_list(text: str, argument: str) -> list[str]:
    """A launch argument holding a YAML list of strings (or one bare word) as a list.

    Raises:
        ValueError: anything else, naming the argument and how to write it.
    """
    value = yaml.safe_load(text)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value
    raise ValueError(f"{argument}:={text!r} is not a list of strings; write {argument}:=\"['a', 'b']\"")


def device_list(text: str) -> list[str]:
    """The devices launch argument as the node's list of chip ids (strings): a YAML list of chip
    ids ("[0, 1]"), one chip id (0), or all.

    Raises:
        ValueError: anything else, naming the argument and how to write it (the node checks
            the ids themselves: distinct, at most 32).
    """
    value = yaml.safe_load(text)
    items = value if isinstance(value, list) else [value]
    if items and all(isinstance(item, (int, str)) and not isinstance(item, bool) for item in items):
        return [str(item) for item in items]
    raise ValueError(f'devices:={text!r} is not a list of chip ids; write devices:="[0, 1]" or devices:=all')


def threshold_value(text: str) -> float:
    """The threshold launch argument as a float (an integer such as 0 is fine).

    Raises:
        ValueError: not a number, so the launch fails with the value instead of the node.
    """
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"threshold:={text!r} is not a number; write e.g. threshold:=0.4") from None


def bool_value(text: str, argument: str) -> bool:
    """A true/false launch argument (YAML's spellings: true, false, True, yes, no, ...).

    Raises:
        ValueError: anything else (a topic given to depth:=, say), naming the argument.
    """
    value = yaml.safe_load(text)
    if isinstance(value, bool):
        return value
    hint = " (the depth topic is depth_image:=<topic>)" if argument == "depth" else ""
    raise ValueError(f"{argument}:={text!r} is not true or false{hint}")


def params_file_cameras(path: str) -> list[str]:
    """The ``cameras`` a params file gives this node (``/**``, ``sam3`` or ``<ns>/sam3``); [] if none.

    Raises:
        ValueError: a file that is not a ROS 2 parameters file, or a cameras value that is
            not a list of strings.
    """
    if not path:
        return []
    try:
        content = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"params_file:={path!r} cannot be read: {error}") from None
    cameras: object = []
    for key, entry in (content or {}).items():
        names_this_node = key in ("/**", NODE_NAME) or str(key).endswith(f"/{NODE_NAME}")
        if names_this_node and isinstance(entry, dict):
            cameras = (entry.get("ros__parameters") or {}).get("cameras", cameras)
    if cameras is None:
        return []
    if not isinstance(cameras, list) or not all(isinstance(name, str) for name in cameras):
        raise ValueError(f"cameras in {path} is not a list of strings: {cameras!r}")
    return cameras


def camera_names(arguments: Mapping[str, str]) -> tuple[list[str], str]:
    """The cameras the node will serve, and where they came from (for error messages)."""
    text = arguments.get("cameras", "").strip()
    if text:
        return name_list(text, "cameras"), "the cameras argument"
    path = arguments.get("params_file", "")
    return params_file_cameras(path), f"params_file {path}"


def remappings(
    arguments: Mapping[str, str], cameras: list[str], source: str = "cameras"
) -> list[tuple[str, str]]:
    """Every input remapping the arguments ask for: the one camera's and each named camera's.

    Raises:
        ValueError: a ``<camera>_image``, ``_depth`` or ``_camera_info`` argument whose camera is
            not in ``cameras`` (it would be silently ignored); the message names the camera.
    """
    image = arguments.get("image", "image").strip() or "image"
    # Both image names, so transport:=compressed follows the same argument.
    pairs = [("image", image), ("image/compressed", f"{image}/compressed")]
    for argument, topic in (("depth_image", "depth"), ("camera_info", "camera_info")):
        target = arguments.get(argument, "").strip()
        if target:
            pairs.append((topic, target))
    for camera in cameras:
        for suffix, topic in CAMERA_INPUTS.items():
            target = arguments.get(f"{camera}_{suffix}", "").strip()
            if not target:
                continue
            pairs.append((f"{camera}/{topic}", target))
            if suffix == "image":
                pairs.append((f"{camera}/image/compressed", f"{target}/compressed"))
    _refuse_unknown_cameras(arguments, cameras, source)
    return pairs


def _refuse_unknown_cameras(arguments: Mapping[str, str], cameras: list[str], source: str) -> None:
    for name, value in arguments.items():
        if name in DECLARED or not value.strip():
            continue
        for suffix in CAMERA_INPUTS:
            camera = name.removesuffix(f"_{suffix}")
            if camera != name and camera and camera not in cameras:
                known = ", ".join(cameras) if cameras else "none"
                raise ValueError(
                    f"{name}:={value} is for camera '{camera}', which is not one of the node's cameras "
                    f"({known}, from {source}); set cameras:=\"['{camera}', ...]\" or fix the name"
                )


def parameter_overrides(arguments: Mapping[str, str], cameras: list[str]) -> dict[str, object]:
    """The node parameters the given (non-empty) arguments set over the params file."""
    overrides: dict[str, object] = {}
    prompts = arguments.get("prompts", "").strip()
    if prompts:
        overrides["prompts"] = prompt_list(prompts)
    for name in ("engine", "model_id", "device", "dtype"):
        value = arguments.get(name, "").strip()
        if value:
            overrides[name] = value
    threshold = arguments.get("threshold", "").strip()
    if threshold:
        overrides["threshold"] = threshold_value(threshold)
    depth = arguments.get("depth", "").strip()
    if depth:
        overrides["depth"] = bool_value(depth, "depth")
    if arguments.get("cameras", "").strip():
        overrides["cameras"] = cameras
    devices = arguments.get("devices", "").strip()
    if devices:
        overrides["devices"] = device_list(devices)
    return overrides


def node_configuration(arguments: Mapping[str, str]) -> tuple[dict[str, object], list[tuple[str, str]]]:
    """Parameter overrides and remappings for the node, from the launch arguments (all strings).

    Raises:
        ValueError: an argument that cannot be used, naming it.
    """
    cameras, source = camera_names(arguments)
    return parameter_overrides(arguments, cameras), remappings(arguments, cameras, source)


def _sam3_node(context: LaunchContext) -> list[LifecycleNode]:
    """The node, with only the launch arguments that were given overriding the params file."""
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import LifecycleNode

    arguments = dict(context.launch_configurations)
    overrides, remapped = node_configuration(arguments)
    parameters: list[object] = [arguments["params_file"]]
    if overrides:
        parameters.append(overrides)
    return [
        LifecycleNode(
            package=PACKAGE,
            executable="sam3_node",
            name=NODE_NAME,
            namespace=LaunchConfiguration("namespace"),
            parameters=parameters,
            remappings=remapped,
            output="screen",
            sigterm_timeout=str(SIGTERM_TIMEOUT_S),
            sigkill_timeout=str(SIGKILL_TIMEOUT_S),
        )
    ]


def _rviz() -> Node:
    """rviz2 with the package's view of the outputs, started only with rviz:=true."""
    from launch.conditions import IfCondition
    from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
    from launch_ros.actions import Node
    from launch_ros.substitutions import FindPackageShare

    config = PathJoinSubstitution([FindPackageShare(PACKAGE), "config", RVIZ_CONFIG])
    return Node(
        package="rviz2",
        executable="rviz2",
        name="rviz2",
        arguments=["-d", config, "-f", LaunchConfiguration("rviz_fixed_frame")],
        condition=IfCondition(LaunchConfiguration("rviz")),
        output="screen",
    )


def generate_launch_description() -> LaunchDescription:
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch.substitutions import PathJoinSubstitution
    from launch_ros.substitutions import FindPackageShare

    default_params = PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "sam3.yaml"])
    return LaunchDescription(
        [
            DeclareLaunchArgument("image", default_value="image", description="Image topic to segment."),
            DeclareLaunchArgument(
                "prompts",
                default_value="",
                description="Texts to segment, e.g. \"['car', 'person']\"; empty: from params_file.",
            ),
            DeclareLaunchArgument(
                "engine",
                default_value="",
                choices=["", "auto", "torch", "ttnn"],
                description="auto, torch or ttnn; empty: from params_file.",
            ),
            DeclareLaunchArgument(
                "model_id",
                default_value="",
                description="Hugging Face model id, local path or tiny-random; empty: from params_file.",
            ),
            DeclareLaunchArgument(
                "device",
                default_value="",
                description="cpu, cuda:N (torch) or a chip id 0, 1, ... (ttnn); empty: from params_file.",
            ),
            DeclareLaunchArgument(
                "dtype", default_value="", description="float32 or bfloat16; empty: from params_file."
            ),
            DeclareLaunchArgument(
                "threshold", default_value="", description="Score threshold, 0 to 1; empty: from params_file."
            ),
            DeclareLaunchArgument(
                "params_file", default_value=default_params, description="Node parameters (YAML)."
            ),
            DeclareLaunchArgument("namespace", default_value="", description="Namespace of the node."),
            DeclareLaunchArgument(
                "cameras",
                default_value="",
                description="Camera names, e.g. \"['front', 'left']\"; empty: from params_file "
                "(none: one camera on image).",
            ),
            DeclareLaunchArgument(
                "devices",
                default_value="",
                description='Tenstorrent chips to serve on, one engine each, e.g. "[0, 1, 2, 3]" or all; '
                "empty: from params_file (none: the one device 'device' names).",
            ),
            DeclareLaunchArgument(
                "rviz",
                default_value="false",
                description="true: also start rviz2 with this package's config/sam3.rviz.",
            ),
            DeclareLaunchArgument(
                "rviz_fixed_frame",
                default_value="camera_color_optical_frame",
                description="RViz's fixed frame: the colour camera's optical frame (the images' frame_id).",
            ),
            DeclareLaunchArgument(
                "depth",
                default_value="",
                description="true: 3D outputs from depth and camera_info; empty: from params_file (false).",
            ),
            DeclareLaunchArgument(
                "depth_image",
                default_value="",
                description="Depth topic registered to the image; empty: depth.",
            ),
            DeclareLaunchArgument(
                "camera_info",
                default_value="",
                description="CameraInfo topic of the colour image; empty: camera_info.",
            ),
            OpaqueFunction(function=_sam3_node),
            _rviz(),
        ]
    )
