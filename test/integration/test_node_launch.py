"""launch/sam3.launch.py: importable without ROS 2's launch packages, its argument logic tested as
plain functions, and a working LaunchDescription where launch_ros exists.

The PyPI ROS 2 wheels have no launch or launch_ros, so on a machine without a ROS 2 install
only ``generate_launch_description`` is skipped; what the arguments do (parameter overrides,
remappings, refusals) is plain Python over the launch configurations (all strings).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAUNCH_FILE = REPO / "launch" / "sam3.launch.py"
PARAMS_FILE = REPO / "config" / "sam3.yaml"
ARGUMENTS = {"image", "prompts", "engine", "model_id", "device", "dtype", "threshold", "params_file"}
ARGUMENTS |= {
    "namespace",
    "cameras",
    "devices",
    "depth",
    "depth_image",
    "camera_info",
    "rviz",
    "rviz_fixed_frame",
}
RVIZ_CONFIG = REPO / "config" / "sam3.rviz"


def _load_launch_module():
    spec = importlib.util.spec_from_file_location("sam3_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def launch_file():
    return _load_launch_module()


def _arguments(**given: str) -> dict[str, str]:
    """The launch configurations as ``ros2 launch`` fills them: every declared default, then ``given``."""
    arguments = dict.fromkeys(_load_launch_module().DECLARED, "")
    defaults = {"image": "image", "params_file": str(PARAMS_FILE), "rviz": "false"}
    return {**arguments, **defaults, "rviz_fixed_frame": "camera_color_optical_frame", **given}


def test_launch_file_declares_every_argument(launch_file) -> None:
    tree = ast.parse(LAUNCH_FILE.read_text(), filename=str(LAUNCH_FILE))
    declared = {
        call.args[0].value
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and getattr(call.func, "id", None) == "DeclareLaunchArgument"
        and call.args
        and isinstance(call.args[0], ast.Constant)
    }
    assert declared == set(launch_file.DECLARED) == ARGUMENTS


def _launch_packages():
    if importlib.util.find_spec("launch_ros") is None:
        pytest.skip("launch_ros is not installed (no PyPI wheel exists; it comes with a ROS 2 install)")
    launch = pytest.importorskip("launch")
    if not hasattr(launch, "LaunchDescription"):
        pytest.skip("the 'launch' package is not installed (only the repository's launch/ folder)")
    return launch


def test_launch_description_declares_every_argument(launch_file) -> None:
    launch = _launch_packages()
    description = launch_file.generate_launch_description()
    assert isinstance(description, launch.LaunchDescription)
    assert {argument.name for argument in description.get_launch_arguments()} == ARGUMENTS


@pytest.mark.parametrize(
    ("text", "prompts"),
    [("['car', 'person']", ["car", "person"]), ("car", ["car"]), ('["traffic light"]', ["traffic light"])],
)
def test_prompts_argument_is_read_as_a_list(launch_file, text: str, prompts: list[str]) -> None:
    assert launch_file.prompt_list(text) == prompts


@pytest.mark.parametrize("text", ["[]", "[1, 2]", "{a: b}", "42"])
def test_bad_prompts_argument_fails_the_launch(launch_file, text: str) -> None:
    with pytest.raises(ValueError, match="not a list of strings"):
        launch_file.prompt_list(text)


@pytest.mark.parametrize(
    ("text", "devices"),
    [("[0, 1, 2, 3]", ["0", "1", "2", "3"]), ("all", ["all"]), ("2", ["2"]), ("['0', '1']", ["0", "1"])],
)
def test_devices_argument_is_read_as_the_nodes_list_of_chip_ids(
    launch_file, text: str, devices: list[str]
) -> None:
    assert launch_file.device_list(text) == devices


@pytest.mark.parametrize("text", ["[]", "{a: 0}", "[[0, 1]]", "true"])
def test_bad_devices_argument_fails_the_launch(launch_file, text: str) -> None:
    with pytest.raises(ValueError, match="not a list of chip ids"):
        launch_file.device_list(text)


def test_four_chips_and_eight_cameras_as_the_launch_files_example_writes_them(launch_file) -> None:
    cameras = "['front', 'rear', 'left', 'right', 'front_left', 'front_right', 'rear_left', 'rear_right']"
    arguments = _arguments(engine="ttnn", devices="[0, 1, 2, 3]", prompts="['person']", cameras=cameras)
    overrides, _ = launch_file.node_configuration(arguments)
    assert overrides["devices"] == ["0", "1", "2", "3"] and len(overrides["cameras"]) == 8
    assert overrides["engine"] == "ttnn" and overrides["prompts"] == ["person"]
    assert 'devices:="[0, 1, 2, 3]"' in launch_file.__doc__ and f'cameras:="{cameras}"' in launch_file.__doc__


def test_threshold_argument_is_read_as_a_number(launch_file) -> None:
    assert launch_file.threshold_value("0") == 0.0 and launch_file.threshold_value("0.4") == 0.4
    with pytest.raises(ValueError, match="not a number"):
        launch_file.threshold_value("high")


def test_defaults_override_nothing_and_remap_only_the_image(launch_file) -> None:
    overrides, remappings = launch_file.node_configuration(_arguments())
    assert overrides == {}
    assert remappings == [("image", "image"), ("image/compressed", "image/compressed")]


def test_depth_true_turns_the_depth_path_on_and_its_topics_are_remapped(launch_file) -> None:
    arguments = _arguments(
        image="/camera/color/image_raw",
        depth="true",
        depth_image="/camera/aligned_depth_to_color/image_raw",
        camera_info="/camera/color/camera_info",
    )
    overrides, remappings = launch_file.node_configuration(arguments)
    assert overrides == {"depth": True}
    assert remappings == [
        ("image", "/camera/color/image_raw"),
        ("image/compressed", "/camera/color/image_raw/compressed"),
        ("depth", "/camera/aligned_depth_to_color/image_raw"),
        ("camera_info", "/camera/color/camera_info"),
    ]


def test_a_topic_given_to_depth_fails_the_launch_and_names_depth_image(launch_file) -> None:
    with pytest.raises(ValueError, match=r"depth:='/camera/depth' is not true or false.*depth_image:="):
        launch_file.node_configuration(_arguments(depth="/camera/depth"))


def test_each_cameras_inputs_remap_that_camera_only(launch_file) -> None:
    arguments = _arguments(
        cameras="['front', 'left']",
        front_image="/front/color/image_raw",
        front_depth="/front/aligned_depth_to_color/image_raw",
        left_camera_info="/left/color/camera_info",
    )
    overrides, remappings = launch_file.node_configuration(arguments)
    assert overrides == {"cameras": ["front", "left"]}
    assert remappings[2:] == [
        ("front/image", "/front/color/image_raw"),
        ("front/image/compressed", "/front/color/image_raw/compressed"),
        ("front/depth", "/front/aligned_depth_to_color/image_raw"),
        ("left/camera_info", "/left/color/camera_info"),
    ]


def test_camera_remaps_work_with_cameras_from_the_params_file(launch_file, tmp_path: Path) -> None:
    params = tmp_path / "robot.yaml"
    text = PARAMS_FILE.read_text().replace("cameras: []", "cameras: [front, rear]")
    assert text != PARAMS_FILE.read_text()
    params.write_text(text)
    arguments = _arguments(params_file=str(params), rear_image="/rear/image_raw")
    overrides, remappings = launch_file.node_configuration(arguments)
    assert "cameras" not in overrides  # the node reads them from the same file
    assert ("rear/image", "/rear/image_raw") in remappings


@pytest.mark.parametrize("cameras", ["", "['front']"], ids=["params-file-none", "argument"])
def test_an_input_for_a_camera_the_node_does_not_have_fails_the_launch_naming_it(
    launch_file, cameras: str
) -> None:
    arguments = _arguments(cameras=cameras, rear_depth="/rear/depth")
    with pytest.raises(ValueError, match=r"rear_depth:=/rear/depth is for camera 'rear', which is not one"):
        launch_file.node_configuration(arguments)


def test_the_params_file_does_not_suggest_depth_as_a_topic_argument() -> None:
    text = PARAMS_FILE.read_text()
    assert "depth:=/" not in text and "depth_image:=" in text


def test_rviz_true_starts_rviz2_with_the_packages_config() -> None:
    """Without launch_ros: the launch file names rviz2 and a config file the package installs."""
    tree = ast.parse(LAUNCH_FILE.read_text())
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)}
    assert {"rviz2", RVIZ_CONFIG.name} <= strings
    assert RVIZ_CONFIG.is_file()


def test_rviz_node_is_there_only_when_asked(launch_file) -> None:
    launch = _launch_packages()
    from launch_ros.actions import Node

    description = launch_file.generate_launch_description()
    rviz = [entity for entity in description.entities if isinstance(entity, Node)]
    assert len(rviz) == 1 and rviz[0].condition is not None
    context = launch.LaunchContext()
    context.launch_configurations.update({"rviz": "false", "rviz_fixed_frame": "camera_link"})
    assert not rviz[0].condition.evaluate(context)
    context.launch_configurations["rviz"] = "true"
    assert rviz[0].condition.evaluate(context)
