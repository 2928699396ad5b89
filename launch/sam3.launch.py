"""Start the /sam3 segmentation node.

    ros2 launch tt_sam3_ros sam3.launch.py image:=/camera/image_raw prompts:="['car', 'person']"

Two cameras, one node (one engine; each camera has its own outputs, served in turn):

    ros2 launch tt_sam3_ros sam3.launch.py cameras:="['front', 'left']" prompts:=car \
        front_image:=/front/color/image_raw left_image:=/left/color/image_raw

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
    cameras      camera names, a YAML list ("['front', 'left']"); empty: the params file's
                 value (none: one camera on ``image``). Each camera reads <camera>/image
                 (<camera>/image/compressed, <camera>/depth, <camera>/camera_info) and
                 publishes /sam3/<camera>/detections, /sam3/<camera>/masks, ...
    <camera>_image  for each camera named in ``cameras``, its image topic (default
                 <camera>/image); not declared, so ``ros2 launch --show-args`` omits it.
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

import yaml
from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode, Node
from launch_ros.substitutions import FindPackageShare

PACKAGE = "tt_sam3_ros"
#: The RViz view installed to share/tt_sam3_ros/config (rviz:=true).
RVIZ_CONFIG = "sam3.rviz"


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


def camera_remappings(context: LaunchContext, cameras: list[str]) -> list[tuple[str, str]]:
    """``<camera>/image`` (and its compressed twin) to the ``<camera>_image`` argument, where given."""
    remappings = []
    for camera in cameras:
        topic = context.launch_configurations.get(f"{camera}_image", "").strip()
        if topic:
            remappings += [(f"{camera}/image", topic), (f"{camera}/image/compressed", f"{topic}/compressed")]
    return remappings


def threshold_value(text: str) -> float:
    """The threshold launch argument as a float (an integer such as 0 is fine).

    Raises:
        ValueError: not a number, so the launch fails with the value instead of the node.
    """
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"threshold:={text!r} is not a number; write e.g. threshold:=0.4") from None


def _sam3_node(context: LaunchContext) -> list[LifecycleNode]:
    """The node, with only the launch arguments that were given overriding the params file."""
    image = LaunchConfiguration("image").perform(context)
    overrides: dict[str, object] = {}
    prompts = LaunchConfiguration("prompts").perform(context).strip()
    if prompts:
        overrides["prompts"] = prompt_list(prompts)
    for name in ("engine", "model_id", "device", "dtype"):
        value = LaunchConfiguration(name).perform(context).strip()
        if value:
            overrides[name] = value
    threshold = LaunchConfiguration("threshold").perform(context).strip()
    if threshold:
        overrides["threshold"] = threshold_value(threshold)
    cameras_text = LaunchConfiguration("cameras").perform(context).strip()
    cameras = name_list(cameras_text, "cameras") if cameras_text else []
    if cameras:
        overrides["cameras"] = cameras
    parameters: list[object] = [LaunchConfiguration("params_file")]
    if overrides:
        parameters.append(overrides)
    return [
        LifecycleNode(
            package=PACKAGE,
            executable="sam3_node",
            name="sam3",
            namespace=LaunchConfiguration("namespace"),
            parameters=parameters,
            # Both input names, so transport:=compressed follows the same argument.
            remappings=[
                ("image", image),
                ("image/compressed", f"{image}/compressed"),
                *camera_remappings(context, cameras),
            ],
            output="screen",
        )
    ]


def _rviz() -> Node:
    """rviz2 with the package's view of the outputs, started only with rviz:=true."""
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
                "rviz",
                default_value="false",
                description="true: also start rviz2 with this package's config/sam3.rviz.",
            ),
            DeclareLaunchArgument(
                "rviz_fixed_frame",
                default_value="camera_color_optical_frame",
                description="RViz's fixed frame: the colour camera's optical frame (the images' frame_id).",
            ),
            OpaqueFunction(function=_sam3_node),
            _rviz(),
        ]
    )
