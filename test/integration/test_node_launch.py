"""launch/sam3.launch.py: valid Python everywhere; a working LaunchDescription where launch_ros exists.

The PyPI ROS 2 wheels have no launch or launch_ros, so on a machine without a ROS 2
install the second half is skipped with that reason. (A bare ``import launch`` is no
test: the repository's own launch/ folder imports as an empty namespace package.)
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

LAUNCH_FILE = Path(__file__).resolve().parents[2] / "launch" / "sam3.launch.py"
ARGUMENTS = {"image", "prompts", "engine", "model_id", "device", "dtype", "threshold", "params_file"}
ARGUMENTS |= {"namespace", "cameras", "rviz", "rviz_fixed_frame"}
RVIZ_CONFIG = LAUNCH_FILE.parents[1] / "config" / "sam3.rviz"


def test_launch_file_is_python_with_a_generate_launch_description() -> None:
    tree = ast.parse(LAUNCH_FILE.read_text(), filename=str(LAUNCH_FILE))
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    declared = {
        call.args[0].value
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and getattr(call.func, "id", None) == "DeclareLaunchArgument"
        and call.args
        and isinstance(call.args[0], ast.Constant)
    }
    assert declared == ARGUMENTS


def _load_launch_module():
    if importlib.util.find_spec("launch_ros") is None:
        pytest.skip("launch_ros is not installed (no PyPI wheel exists; it comes with a ROS 2 install)")
    launch = pytest.importorskip("launch")
    if not hasattr(launch, "LaunchDescription"):
        pytest.skip("the 'launch' package is not installed (only the repository's launch/ folder)")
    spec = importlib.util.spec_from_file_location("sam3_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, launch


def test_launch_description_declares_every_argument() -> None:
    module, launch = _load_launch_module()
    description = module.generate_launch_description()
    assert isinstance(description, launch.LaunchDescription)
    assert {argument.name for argument in description.get_launch_arguments()} == ARGUMENTS


@pytest.mark.parametrize(
    ("text", "prompts"),
    [("['car', 'person']", ["car", "person"]), ("car", ["car"]), ('["traffic light"]', ["traffic light"])],
)
def test_prompts_argument_is_read_as_a_list(text: str, prompts: list[str]) -> None:
    module, _ = _load_launch_module()
    assert module.prompt_list(text) == prompts


@pytest.mark.parametrize("text", ["[]", "[1, 2]", "{a: b}", "42"])
def test_bad_prompts_argument_fails_the_launch(text: str) -> None:
    module, _ = _load_launch_module()
    with pytest.raises(ValueError, match="not a list of strings"):
        module.prompt_list(text)


def test_threshold_argument_is_read_as_a_number() -> None:
    module, _ = _load_launch_module()
    assert module.threshold_value("0") == 0.0 and module.threshold_value("0.4") == 0.4
    with pytest.raises(ValueError, match="not a number"):
        module.threshold_value("high")


def test_each_cameras_image_argument_remaps_that_camera_only() -> None:
    module, launch = _load_launch_module()
    context = launch.LaunchContext()
    context.launch_configurations["front_image"] = "/front/color/image_raw"
    assert module.camera_remappings(context, ["front", "left"]) == [
        ("front/image", "/front/color/image_raw"),
        ("front/image/compressed", "/front/color/image_raw/compressed"),
    ]
    assert module.name_list("['front', 'left']", "cameras") == ["front", "left"]


def test_rviz_true_starts_rviz2_with_the_packages_config() -> None:
    """Without launch_ros: the launch file names rviz2 and a config file the package installs."""
    source = LAUNCH_FILE.read_text()
    tree = ast.parse(source)
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)}
    assert {"rviz2", RVIZ_CONFIG.name} <= strings
    assert RVIZ_CONFIG.is_file()


def test_rviz_node_is_there_only_when_asked() -> None:
    module, launch = _load_launch_module()
    from launch_ros.actions import Node

    description = module.generate_launch_description()
    rviz = [entity for entity in description.entities if isinstance(entity, Node)]
    assert len(rviz) == 1 and rviz[0].condition is not None
    context = launch.LaunchContext()
    context.launch_configurations.update({"rviz": "false", "rviz_fixed_frame": "camera_link"})
    assert not rviz[0].condition.evaluate(context)
    context.launch_configurations["rviz"] = "true"
    assert rviz[0].condition.evaluate(context)
