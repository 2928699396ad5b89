"""The package built in a ROS 2 workspace by colcon, as a user builds it, and its node started.

The workspace is ``<tmp>/ws/src/tt_sam3_ros`` (a link to this repository), built with
``python -m colcon build`` run by the suite's interpreter: colcon runs setup.py with the
Python that runs colcon, so the installed executables start with that environment's Python
(a venv made with ``--system-site-packages`` on a ROS 2 host). The install is then used
the way a user uses it: ``. install/setup.sh``, then the node from ``lib/tt_sam3_ros``.

Not covered without a ROS 2 installation (the PyPI ROS 2 wheels have no ros2cli, launch or
launch_ros): ``ros2 run`` and ``ros2 pkg prefix`` (the test asks ament_index_python, the
library they call, instead), ``ros2 launch tt_sam3_ros sam3.launch.py`` and
``rosdep install``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.sam3_client import make_image, running_node, scene

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "tt_sam3_ros"
#: What setup.py's console_scripts name; `ros2 run tt_sam3_ros <name>` finds them in lib/<package>.
EXECUTABLES = ("sam3_node", "tt-sam3")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A colcon workspace holding this repository, built; returns its root."""
    if importlib.util.find_spec("colcon_core") is None:
        pytest.skip(
            "colcon is not installed in this environment (make setup installs requirements/colcon.txt)"
        )
    root = tmp_path_factory.mktemp("ws")
    (root / "src").mkdir()
    (root / "src" / PACKAGE).symlink_to(REPO, target_is_directory=True)
    done = subprocess.run(
        [sys.executable, "-m", "colcon", "build", "--event-handlers", "console_direct-"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    # One package: interfaces/ (the private vision_msgs) has a COLCON_IGNORE.
    assert sorted(path.name for path in (root / "install").iterdir() if path.is_dir()) == [PACKAGE]
    return root


def sourced(workspace: Path, command: str) -> list[str]:
    """``command`` run by bash after ``. install/setup.sh``, as in a user's shell."""
    return ["bash", "-c", f'. "{workspace}/install/setup.sh" && {command}']


def test_the_install_holds_what_ros2_run_and_launch_look_for(workspace: Path) -> None:
    prefix = workspace / "install" / PACKAGE
    for name in EXECUTABLES:
        executable = prefix / "lib" / PACKAGE / name
        assert executable.is_file() and os.access(executable, os.X_OK), executable
        # Built against the environment that ran colcon: its Python starts the node.
        assert executable.read_text().splitlines()[0] == f"#!{sys.executable}"
    share = prefix / "share" / PACKAGE
    assert (share / "package.xml").read_bytes() == (REPO / "package.xml").read_bytes()
    for folder, pattern in (("launch", "*.launch.py"), ("config", "*.yaml"), ("config", "*.rviz")):
        wanted = sorted(path.name for path in (REPO / folder).glob(pattern))
        assert wanted, f"no {folder}/{pattern} in the repository"
        assert sorted(path.name for path in (share / folder).glob(pattern)) == wanted
    assert (prefix / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE).is_file()


def test_the_sourced_install_is_found_by_ament_index_and_imported_from_the_install(workspace: Path) -> None:
    probe = (
        "from ament_index_python.packages import get_package_prefix, get_package_share_directory;"
        "import tt_sam3_ros;"
        f"print(get_package_prefix('{PACKAGE}'));"
        f"print(get_package_share_directory('{PACKAGE}'));"
        "print(tt_sam3_ros.__file__)"
    )
    # Run from the workspace root, as a user does: the repository's folder is not on sys.path.
    command = sourced(workspace, f'"{sys.executable}" -c "{probe}"')
    done = subprocess.run(command, cwd=workspace, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    prefix, share, module = done.stdout.split()
    assert Path(prefix) == workspace / "install" / PACKAGE
    assert Path(share) == workspace / "install" / PACKAGE / "share" / PACKAGE
    assert Path(module).is_relative_to(workspace / "install" / PACKAGE / "lib")


def test_the_installed_node_starts_with_the_tiny_model_and_answers(workspace: Path, tmp_path: Path) -> None:
    node = workspace / "install" / PACKAGE / "lib" / PACKAGE / "sam3_node"
    # The installed params file, as `ros2 launch` passes it by default.
    params_file = workspace / "install" / PACKAGE / "share" / PACKAGE / "config" / "sam3.yaml"
    # bash -c SCRIPT NAME ARGS: the node's -p arguments arrive as "$@".
    command = f'exec "{node}" --ros-args --params-file "{params_file}" "$@"'
    program = [*sourced(workspace, command), "sam3_node"]
    params = {"model_id": "tiny-random", "engine": "torch", "prompts": "['bottle']", "threshold": "0.0"}
    params["max_instances"] = "2"
    with running_node(params, tmp_path / "node.log", program) as sam3:
        detections, mask = sam3.ask(make_image(scene(seed=3)))
    assert [sam3.prompt_of(d) for d in detections.detections] == ["bottle", "bottle"]
    assert (mask.width, mask.height) == (96, 64)
