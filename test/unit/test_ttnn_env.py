"""A check that cannot run is skipped on a developer's machine and fails on CI (CI set); the
mock runners run in the suite's own interpreter when it imports ttnn, else in .venv-ttnn."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import ttnn_env


@pytest.fixture
def no_ttnn_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository whose .venv-ttnn was never made, run by an interpreter without ttnn."""
    monkeypatch.setattr(ttnn_env, "TTNN_VENV", tmp_path / ".venv-ttnn")
    monkeypatch.setattr(ttnn_env, "suite_ttnn", lambda: None)
    return tmp_path / ".venv-ttnn"


@pytest.mark.parametrize("value", ["true", "1", "yes", "TRUE"])
def test_on_ci_a_missing_ttnn_env_fails_with_the_reason(no_ttnn_env, monkeypatch, value) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(
        pytest.fail.Exception, match=re.escape("mock p150a not run: no .venv-ttnn; run `make ttnn-env`")
    ):
        ttnn_env.ttnn_python("mock p150a")


@pytest.mark.parametrize("value", [None, "", "0", "false"])
def test_off_ci_a_missing_ttnn_env_skips_with_the_reason(no_ttnn_env, monkeypatch, value) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match=re.escape("no .venv-ttnn")):
        ttnn_env.ttnn_python("mock p150a")


def test_on_ci_an_unreachable_pypi_fails_with_the_bootstrap_reason(no_ttnn_env, monkeypatch) -> None:
    no_ttnn_env.mkdir()
    (no_ttnn_env / "SKIPPED").write_text("PyPI cannot be reached\n")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(
        pytest.fail.Exception, match=re.escape("ttnn conformance not run: PyPI cannot be reached")
    ):
        ttnn_env.ttnn_python("ttnn conformance")


def test_on_ci_a_wheel_without_the_package_fails(no_ttnn_env, monkeypatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=re.escape("no .venv-ttnn with the real ttnn wheel")):
        ttnn_env.ttnn_package()


def test_the_suites_own_interpreter_runs_the_mock_when_it_imports_ttnn(no_ttnn_env, monkeypatch) -> None:
    """Where the suite's interpreter has ttnn (the main environment), no .venv-ttnn is needed,
    even on CI: the runners get the suite's interpreter, with its real torch."""
    wheel = no_ttnn_env.parent / "site-packages" / "ttnn"
    monkeypatch.setattr(ttnn_env, "suite_ttnn", lambda: wheel)
    monkeypatch.setenv("CI", "true")
    assert ttnn_env.ttnn_python("mock p150a") == Path(sys.executable)
    assert ttnn_env.ttnn_package() == wheel


@pytest.mark.ttnn_wheel
def test_suite_ttnn_is_the_importable_ttnn() -> None:
    spec = importlib.util.find_spec("ttnn")
    if spec is None:
        assert ttnn_env.suite_ttnn() is None
    else:
        assert ttnn_env.suite_ttnn() == Path(next(iter(spec.submodule_search_locations)))
        assert (ttnn_env.suite_ttnn() / "__init__.py").is_file()


def test_the_real_env_is_found_when_made() -> None:
    """The interpreter with the wheel: the suite's own where it imports ttnn, else .venv-ttnn's."""
    if ttnn_env.suite_ttnn() is not None:
        assert ttnn_env.ttnn_python("conformance") == Path(sys.executable)
        assert ttnn_env.ttnn_package() == ttnn_env.suite_ttnn()
        return
    if not (ttnn_env.TTNN_VENV / "bin" / "python").exists():
        ttnn_env.cannot_run("no .venv-ttnn here to find")
    assert ttnn_env.ttnn_python("conformance") == ttnn_env.TTNN_VENV / "bin" / "python"
    assert ttnn_env.ttnn_package().name == "ttnn"
