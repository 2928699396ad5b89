"""Fail on a test that cannot fail: a test function under test/ with no assertion in it.

A test asserts when its body holds an ``assert``, a ``with pytest.raises(...)`` or
``pytest.warns(...)``, a call to ``pytest.fail``, to anything named ``assert*`` (numpy's and
torch's testing helpers, ``Mock.assert_called_once``), a ``raise AssertionError``, a subprocess run
with ``check=True``, or a call to a helper defined under test/ that asserts in one of these ways
(helpers calling helpers count). Only tests that must merely not raise are exempt, each listed in
ALLOWED with the reason.

    .venv/bin/python tools/check_test_assertions.py [test]

Standard library only; `make test` runs it before pytest.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

#: "path::test_name" (path relative to the repository) -> why not raising is the whole check.
ALLOWED: dict[str, str] = {
    "test/unit/test_camera_model.py::test_no_binning_and_the_full_image_as_roi_are_accepted": (
        "the accepted calibrations: constructing the camera without an InputError is the behaviour"
    ),
    "test/unit/test_docs.py::test_python_examples_run": (
        "every documented Python block runs as written; what a block prints is the docs' own claim"
    ),
}
#: pytest's context managers that assert what the block does.
_ASSERTING_CONTEXTS = {"raises", "warns", "deprecated_call"}


def _called_name(call: ast.Call) -> str:
    """The last name of what ``call`` calls: ``np.testing.assert_allclose`` -> assert_allclose."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _asserts_directly(node: ast.AST) -> bool:
    """Inside node: an assert statement, ``raise AssertionError``, pytest.fail, an assert* call, a
    pytest.raises/warns block, or a subprocess run with check=True (a failing child raises)."""
    for child in ast.walk(node):
        if isinstance(child, ast.Assert):
            return True
        if isinstance(child, ast.Raise) and child.exc is not None:
            raised = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
            if isinstance(raised, ast.Name) and raised.id == "AssertionError":
                return True
        if isinstance(child, ast.Call):
            name = _called_name(child)
            if name.startswith("assert") or name == "fail" or name in _ASSERTING_CONTEXTS:
                return True
            if any(k.arg == "check" and getattr(k.value, "value", None) is True for k in child.keywords):
                return True
    return False


def _calls(node: ast.AST) -> tuple[set[str], set[str]]:
    """Names called inside node: (plain names, including functions passed as arguments; methods)."""
    plain, methods = set(), set()
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            if isinstance(child.func, ast.Name):
                plain.add(child.func.id)
            elif isinstance(child.func, ast.Attribute):
                methods.add(child.func.attr)
            plain.update(arg.id for arg in child.args if isinstance(arg, ast.Name))
    return plain, methods


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _methods(tree: ast.Module) -> set[ast.AST]:
    """Functions defined directly in a class body."""
    return {
        item
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for item in node.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _imported_names(tree: ast.Module) -> set[str]:
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


class Helpers:
    """Which helpers assert. A plain-name call resolves to a function of the same file, else (when
    the file imports the name) to any test/ function of that name; a method call to any method of
    that name defined in a test/ class."""

    def __init__(self, trees: dict[Path, ast.Module]) -> None:
        self.local: dict[Path, dict[str, ast.AST]] = {}
        self.methods: dict[str, list[ast.AST]] = {}
        self.imports = {path: _imported_names(tree) for path, tree in trees.items()}
        self.owner: dict[ast.AST, Path] = {}
        for path, tree in trees.items():
            methods = _methods(tree)
            self.local[path] = {}
            for function in _functions(tree):
                self.owner[function] = path
                if function in methods:
                    self.methods.setdefault(function.name, []).append(function)
                elif not function.name.startswith("test_"):
                    self.local[path].setdefault(function.name, function)
        self.asserting = {f for f in self.owner if _asserts_directly(f)}
        changed = True
        while changed:
            changed = False
            for function in self.owner:
                if function not in self.asserting and self.calls_asserting(function, self.owner[function]):
                    self.asserting.add(function)
                    changed = True

    def _resolve(self, path: Path, name: str) -> list[ast.AST]:
        if name in self.local[path]:
            return [self.local[path][name]]
        if name in self.imports[path]:
            return [f for functions in self.local.values() for n, f in functions.items() if n == name]
        return []

    def calls_asserting(self, function: ast.AST, path: Path) -> bool:
        plain, methods = _calls(function)
        targets = [f for name in plain for f in self._resolve(path, name)]
        targets += [f for name in methods for f in self.methods.get(name, [])]
        return any(target in self.asserting for target in targets if target is not function)


def tests_without_assertions(root: Path, repo: Path) -> list[str]:
    """'path::test' of every test function under root with no assertion and not in ALLOWED."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(root.rglob("*.py"))}
    helpers = Helpers(trees)
    found = []
    for path, tree in trees.items():
        if not path.name.startswith("test_"):
            continue
        for function in _functions(tree):
            if not function.name.startswith("test_"):
                continue
            if function in helpers.asserting:
                continue
            where = path.resolve()
            key = f"{where.relative_to(repo) if where.is_relative_to(repo) else where}::{function.name}"
            if key not in ALLOWED:
                found.append(f"{key} (line {function.lineno})")
    return found


def main(argv: list[str]) -> int:
    repo = Path(__file__).resolve().parents[1]
    root = Path(argv[0]) if argv else repo / "test"
    found = tests_without_assertions(root.resolve(), repo)
    for key in found:
        print(f"no assertion: {key}", file=sys.stderr)
    if found:
        print(
            f"{len(found)} test(s) cannot fail: assert what a user would notice, or list a test that "
            "must only not raise in ALLOWED (tools/check_test_assertions.py) with the reason",
            file=sys.stderr,
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
