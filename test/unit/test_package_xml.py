"""package.xml declares what the package uses, and nothing that rosdep would install for nothing."""

from __future__ import annotations

import ast
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPOSITORY = Path(__file__).parents[2]
PROJECT_URL = "https://github.com/tt-sam3/tt_sam3_ros"

#: rosdep keys of Python libraries -> the module the code imports.
PYTHON_MODULES = {
    "python3-numpy": "numpy",
    "python3-opencv": "cv2",
    "python3-pil": "PIL",
    "python3-scipy": "scipy",
    "python3-yaml": "yaml",
}
#: Declared and used, though not imported under their own name.
USED_WITHOUT_AN_IMPORT = {
    "lifecycle_msgs": "the node is an rclpy LifecycleNode: its state services are lifecycle_msgs types",
}
#: On the README's install these come from pip (requirements/core.txt), never from rosdep.
FROM_PIP_ONLY = ("python3-torch", "python3-torchvision", "python3-safetensors", "python3-transformers")


def exec_depends() -> list[str]:
    root = ElementTree.parse(REPOSITORY / "package.xml").getroot()
    return [element.text.strip() for element in root.iter("exec_depend") if element.text]


def imported_modules() -> set[str]:
    """Top-level names imported anywhere in the package and its launch files."""
    names: set[str] = set()
    for path in [*(REPOSITORY / "tt_sam3_ros").rglob("*.py"), *(REPOSITORY / "launch").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def test_every_declared_run_time_dependency_is_used() -> None:
    imported = imported_modules()
    unused = [
        key
        for key in exec_depends()
        if key not in USED_WITHOUT_AN_IMPORT and PYTHON_MODULES.get(key, key) not in imported
    ]
    assert unused == []


def test_every_library_the_distribution_provides_and_the_code_imports_is_declared() -> None:
    """The README's workspace install takes numpy, OpenCV, Pillow, SciPy and PyYAML from the
    distribution (rosdep): each one the package or its launch file imports must be declared."""
    imported = imported_modules()
    declared = set(exec_depends())
    missing = [key for key, module in PYTHON_MODULES.items() if module in imported and key not in declared]
    assert missing == []


def test_libraries_that_pip_provides_are_not_declared_to_rosdep() -> None:
    """README: the distributions' PyTorch is older than SAM 3 needs; core.txt ranges the ones tested."""
    assert [key for key in exec_depends() if key in FROM_PIP_ONLY] == []
    core = (REPOSITORY / "requirements" / "core.txt").read_text(encoding="utf-8")
    assert "torch>=" in core and "safetensors>=" in core


def test_package_xml_is_valid_and_says_where_the_project_lives() -> None:
    """What `rosdep`, bloom and index.ros.org read: a valid format 3 manifest with a repository
    and an issue tracker to send users to, and maintainers with a name and an email address."""
    from catkin_pkg.package import parse_package

    package = parse_package(str(REPOSITORY / "package.xml"))
    package.validate()  # raises InvalidPackage on a malformed field (REP 149)
    urls = {url.type: url.url for url in package.urls}
    assert urls.get("repository") == PROJECT_URL
    assert urls.get("bugtracker") == f"{PROJECT_URL}/issues"
    assert urls.get("website") == f"{PROJECT_URL}#readme"
    assert package.maintainers
    for person in package.maintainers:
        assert person.name.strip() and re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]+", person.email or "")


def test_setup_py_names_the_same_project_and_maintainer() -> None:
    """pip show and colcon read setup.py: it must not disagree with package.xml."""
    from catkin_pkg.package import parse_package

    package = parse_package(str(REPOSITORY / "package.xml"))
    keywords = {
        keyword.arg: keyword.value.value
        for node in ast.walk(ast.parse((REPOSITORY / "setup.py").read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup"
        for keyword in node.keywords
        if isinstance(keyword.value, ast.Constant)
    }
    assert keywords["url"] == PROJECT_URL
    assert keywords["maintainer"] == package.maintainers[0].name
    assert keywords["maintainer_email"] == package.maintainers[0].email
    assert keywords["version"] == package.version


def test_vision_msgs_is_declared_at_a_version_with_label_info() -> None:
    """The node latches vision_msgs/LabelInfo, which 4.0 does not have: rosdep and bloom must not
    pair the package with an older vision_msgs."""
    from catkin_pkg.package import parse_package

    package = parse_package(str(REPOSITORY / "package.xml"))
    (vision_msgs,) = [d for d in package.exec_depends if d.name == "vision_msgs"]
    assert tuple(int(part) for part in (vision_msgs.version_gte or "0").split(".")) >= (4, 1, 0)
