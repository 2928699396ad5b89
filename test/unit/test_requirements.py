"""The requirements as ranges and the locks each platform row installs (README, "Platforms"):
setup.py and requirements/core.txt state the same ranges; every lock lies inside them and holds
its row's constraints (the distribution's own versions); each lower bound is what some row
installs, so the suite runs at the bottom of every range as well as the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "requirements"
#: Each platform row, its lock and the constraints it is installed with (tools/bootstrap.sh).
ROWS = {
    "ubuntu24.04": ["ubuntu24.04.txt", "blackhole.txt"],
    "ubuntu22.04": ["ubuntu22.04.txt"],
    "numpy2": [],
}


def requirement_lines(path: Path) -> list[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def ranges(path: Path) -> dict[str, Requirement]:
    return {canonicalize_name(r.name): r for r in map(Requirement, requirement_lines(path))}


def lock(row: str) -> dict[str, Version]:
    pins = (line.split("==") for line in requirement_lines(REQUIREMENTS / "lock" / f"{row}.txt"))
    return {canonicalize_name(name): Version(version) for name, version in pins}


def setup_requirements() -> list[str]:
    """install_requires and the torch extra, read from setup.py's setup() call."""
    tree = ast.parse((REPO / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    keywords = {
        k.arg: ast.literal_eval(k.value)
        for k in call.keywords
        if k.arg in ("install_requires", "extras_require")
    }
    return [r for r in keywords["install_requires"] if r != "setuptools"] + keywords["extras_require"][
        "torch"
    ]


def test_setup_py_states_core_txts_ranges() -> None:
    core = ranges(REQUIREMENTS / "core.txt")
    stated = {canonicalize_name(r.name): r for r in map(Requirement, setup_requirements())}
    assert {name: str(r.specifier) for name, r in stated.items()} == {
        name: str(r.specifier) for name, r in core.items()
    }


@pytest.mark.parametrize("row", ROWS)
def test_each_lock_lies_inside_every_range(row: str) -> None:
    pins = lock(row)
    wanted = ranges(REQUIREMENTS / "core.txt") | ranges(REQUIREMENTS / "dev.txt")
    outside = {name: str(pins.get(name)) for name, r in wanted.items() if pins.get(name) not in r.specifier}
    assert not outside, f"{row}: outside requirements/core.txt or dev.txt: {outside}"


@pytest.mark.parametrize("row", ROWS)
def test_each_lock_holds_its_rows_constraints(row: str) -> None:
    pins = lock(row)
    for name in ROWS[row]:
        for name_, r in ranges(REQUIREMENTS / "constraints" / name).items():
            assert pins.get(name_) in r.specifier, f"{row}: {name_} {pins.get(name_)} against {name}'s {r}"


def test_every_lower_bound_is_installed_by_some_row() -> None:
    """The suite runs at the bottom of each range, not only at the top."""
    locks = [lock(row) for row in ROWS]
    untested = []
    for name, r in ranges(REQUIREMENTS / "core.txt").items():
        lower = next((Version(s.version) for s in r.specifier if s.operator == ">="), None)
        if lower is None or not any(pins.get(name) == lower for pins in locks):
            untested.append(str(r))
    assert not untested, f"no row installs these lower bounds: {untested}"


def test_the_main_row_holds_ttnn_and_the_others_their_distributions_numpy() -> None:
    assert lock("ubuntu24.04")[canonicalize_name("ttnn")] == Version("0.81.1")
    assert lock("ubuntu24.04")["numpy"] == Version("1.26.4")
    assert lock("ubuntu22.04")["numpy"] == Version("1.21.5")
    assert lock("numpy2")["numpy"].major == 2


def test_workspace_requirements_pin_what_the_ubuntu_rows_lock() -> None:
    """requirements/workspace.txt (the README's ROS 2 workspace install, beside the distribution's
    numpy) pins what both Ubuntu rows were tested with, and leaves numpy to the distribution."""
    workspace = {
        canonicalize_name(n): Version(v)
        for n, v in (line.split("==") for line in requirement_lines(REQUIREMENTS / "workspace.txt"))
    }
    assert workspace and "numpy" not in workspace
    for row in ("ubuntu24.04", "ubuntu22.04"):
        pins = lock(row)
        assert {name: pins.get(name) for name in workspace} == workspace, row
