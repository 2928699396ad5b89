"""The package's layout is its architecture (docs/design/layout.md): each package imports only
what its rule allows, nothing but ``tt_sam3_ros.ros`` touches ROS, and no two modules import each
other, directly or round a circle, at import time or lazily inside a function."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "tt_sam3_ros"

#: What each package's modules may import from tt_sam3_ros (its own package included).
MAY_IMPORT = {
    "core": {"core", "engines", "weights"},
    "runtime": {"core", "engines", "weights", "runtime"},
    "engines": {"engines", "weights", "core"},
    "weights": {"weights", "engines", "core"},
    "ros": {"core", "engines", "weights", "runtime", "ros"},
    # The `publish-images` verb runs the ROS publisher, imported only when that verb is asked for.
    "cli": {"core", "engines", "weights", "cli", "ros.publish_images"},
}
#: What a package outside the engines may import of them: the facade (engines/__init__.py: the
#: choice of engine, its options, opening chips) and the interface every engine has.
ENGINE_FACADE = {"tt_sam3_ros.engines", "tt_sam3_ros.engines.base"}
#: Top-level modules of ROS 2 itself: rclpy, launch, rosidl, and every message package.
ROS_MODULES = {"rclpy", "rcl_interfaces", "launch", "launch_ros", "rosidl_runtime_py", "ament_index_python"}


def is_ros(module: str) -> bool:
    top = module.split(".")[0]
    return top in ROS_MODULES or top.endswith(("_msgs", "_srvs", "_interfaces"))


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path) -> set[str]:
    """Every module ``path`` imports, wherever in the file the statement is (a type checker's
    ``if TYPE_CHECKING:`` imports aside: they never run)."""
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in _executed(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            # `from pkg import module` names a module: that module is what is imported.
            found.update(
                f"{base}.{alias.name}" for alias in node.names if _is_module(f"{base}.{alias.name}", root)
            )
    return found


def _executed(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:``, which only a type checker runs."""
    nodes, pending = [], [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            pending.extend(node.orelse)
            continue
        nodes.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return nodes


def _is_module(name: str, root: Path) -> bool:
    if not name.startswith(root.name + "."):
        return False
    relative = Path(*name.split(".")[1:])
    return (root / relative).with_suffix(".py").exists() or (root / relative / "__init__.py").exists()


def graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's own modules it imports (packages' __init__ only when named)."""
    modules = {module_name(path, root): path for path in root.rglob("*.py")}
    return {
        name: {m for m in imports(path, root) if m in modules and m != name} for name, path in modules.items()
    }


def violations(root: Path) -> list[str]:
    """Each import a module's package rule forbids, and each ROS import outside ``ros``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        parts = name.split(".")
        package = parts[1] if len(parts) > 2 or (len(parts) == 2 and (root / parts[1]).is_dir()) else None
        for imported in sorted(imports(path, root)):
            if is_ros(imported) and package != "ros":
                found.append(f"{name} imports {imported} (only tt_sam3_ros.ros may import ROS)")
            if package in MAY_IMPORT and imported.startswith(root.name + "."):
                target = imported.split(".")[1:]
                allowed = MAY_IMPORT[package]
                if target and target[0] not in allowed and ".".join(target[:2]) not in allowed:
                    found.append(f"{name} imports {imported} ({package} may import {sorted(allowed)})")
                elif (
                    package not in {"engines", "weights"}
                    and target[:1] == ["engines"]
                    and imported not in ENGINE_FACADE
                ):
                    found.append(
                        f"{name} imports {imported} (outside the engines, only {sorted(ENGINE_FACADE)})"
                    )
    return found


def circles(root: Path) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    edges = graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in edges[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_each_package_imports_only_what_its_rule_allows() -> None:
    assert violations(PACKAGE) == []


def test_no_module_imports_itself_round_a_circle() -> None:
    assert circles(PACKAGE) == []


def test_every_module_lives_in_a_package_with_a_rule() -> None:
    """A new top-level module would have no rule; the old paths kept for one release are aliases."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in {"__init__.py", "_moved.py"})
    for name in loose:
        assert "alias(__name__," in (PACKAGE / name).read_text(), f"tt_sam3_ros/{name} is not in a package"
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(
        MAY_IMPORT
    )


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "tt_sam3_ros"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for directory in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        (directory / "__init__.py").touch()
    return root


@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        ("import rclpy\n", "imports rclpy"),
        ("def f():\n    from sensor_msgs.msg import Image\n", "imports sensor_msgs.msg"),
        ("from tt_sam3_ros.ros import node\n", "core may import"),
        ("from ..runtime import worker\n", "core may import"),
        ("from tt_sam3_ros.engines.ttnn_model.device import BlackholeChips\n", "outside the engines, only"),
    ],
)
def test_the_rule_catches_a_core_module_that_reaches_out(tmp_path: Path, source: str, complaint: str) -> None:
    root = _tree(
        tmp_path,
        {
            "core/bad.py": source,
            "ros/node.py": "",
            "runtime/worker.py": "",
            "engines/ttnn_model/device.py": "",
        },
    )
    found = violations(root)
    assert found and all(complaint in line for line in found), found


def test_the_circle_check_catches_a_lazy_import_back(tmp_path: Path) -> None:
    """node.py importing the process entry inside a function, which imports node.py: a circle."""
    root = _tree(
        tmp_path,
        {
            "ros/node.py": "def main():\n    from tt_sam3_ros.ros.main import run\n",
            "ros/main.py": "from tt_sam3_ros.ros.node import main\n",
        },
    )
    assert circles(root) == [["tt_sam3_ros.ros.main", "tt_sam3_ros.ros.node"]]


@pytest.mark.parametrize("old", ["segmenter", "exemplars", "errors", "tracking", "video_tracker"])
def test_the_python_apis_old_paths_still_import_with_a_deprecation_warning(old: str) -> None:
    """In a fresh interpreter (an alias warns once, when first imported): the old path is the core
    module itself, and the warning names where it went."""
    probe = (
        "import warnings, importlib\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module('tt_sam3_ros.{old}')\n"
        f"new = importlib.import_module('tt_sam3_ros.core.{old}')\n"
        "print(old is new, [str(w.message) for w in caught if w.category is DeprecationWarning])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    same, messages = done.stdout.strip().split(" ", 1)
    assert same == "True"
    assert f"tt_sam3_ros.{old} moved to tt_sam3_ros.core.{old}" in messages


def test_the_python_api_names_import_from_the_package() -> None:
    import tt_sam3_ros
    from tt_sam3_ros.core.exemplars import Exemplar
    from tt_sam3_ros.core.segmenter import Sam3Segmenter

    assert tt_sam3_ros.Sam3Segmenter is Sam3Segmenter
    assert tt_sam3_ros.Exemplar is Exemplar
    for name in tt_sam3_ros.__all__:
        assert getattr(tt_sam3_ros, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'Sam3Node'"):
        tt_sam3_ros.Sam3Node  # noqa: B018 (the ROS node is not part of the Python API)
