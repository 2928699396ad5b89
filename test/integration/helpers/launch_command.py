"""The node command line ``ros2 launch tt_sam3_ros sam3.launch.py ...`` runs, made without launch_ros.

There is no launch or launch_ros wheel (docs/design/facts.md, ROS 2 from PyPI), so ``ros2 launch``
itself cannot run here. What the launch file decides is plain Python: ``node_configuration`` turns
the launch arguments into parameter overrides and remappings, and its LifecycleNode is given
``parameters=[params_file, overrides]``. launch_ros turns that into the node's command line
(launch_ros.actions.Node._perform_substitutions): ``-r __node:=sam3 -r __ns:=/``, one
``--params-file`` per entry (a dict written to a file of its own under the node's full name, its
string values kept strings), then ``-r from:=to`` per remapping. This module builds the same
command line, with ``python -m tt_sam3_ros.ros.main`` for the ``sam3_node`` console script.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import yaml

REPO = Path(__file__).resolve().parents[3]
LAUNCH_FILE = REPO / "launch" / "sam3.launch.py"
#: The declared arguments' defaults that are not empty (launch/sam3.launch.py); ``params_file``
#: defaults to the package's config/sam3.yaml, the repository's here.
DEFAULTS = {
    "image": "image",
    "params_file": str(REPO / "config" / "sam3.yaml"),
    "rviz": "false",
    "rviz_fixed_frame": "camera_color_optical_frame",
}


def launch_file() -> ModuleType:
    """launch/sam3.launch.py as a module (it imports without launch or launch_ros)."""
    spec = importlib.util.spec_from_file_location("sam3_launch", LAUNCH_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launch_arguments(**given: str) -> dict[str, str]:
    """The launch configurations as ``ros2 launch`` fills them: every declared argument at its
    default, then ``given`` (all strings, as on the command line)."""
    return {**dict.fromkeys(launch_file().DECLARED, ""), **DEFAULTS, **given}


def node_command(arguments: dict[str, str], folder: Path) -> list[str]:
    """The node's command line for these launch configurations; the overrides file goes in ``folder``.

    Raises:
        ValueError: an argument the launch file refuses (the launch would fail with it).
    """
    module = launch_file()
    overrides, remapped = module.node_configuration(arguments)
    namespace = "/" + arguments["namespace"].strip("/")
    command = [sys.executable, "-m", "tt_sam3_ros.ros.main", "--ros-args"]
    command += ["-r", f"__node:={module.NODE_NAME}", "-r", f"__ns:={namespace}"]
    command += ["--params-file", arguments["params_file"]]
    if overrides:
        path = folder / "launch_params.yaml"
        name = f"{namespace.rstrip('/')}/{module.NODE_NAME}"
        path.write_text(yaml.safe_dump({name: {"ros__parameters": overrides}}))
        command += ["--params-file", str(path)]
    for source, target in remapped:
        command += ["-r", f"{source}:={target}"]
    return command
