"""tools/check_test_assertions.py finds the tests that cannot fail, and only those."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "check_test_assertions.py"

HELPERS = """
def check_answer(value):
    assert value == 1


def relay(value):
    check_answer(value)


class Client:
    def ask(self):
        raise AssertionError("no answer")


def run():
    assert True
"""

TESTS = """
import subprocess
import numpy as np
import pytest
from helpers import relay


def local_check(value):
    np.testing.assert_equal(value, 1)


def test_plain_assert():
    assert 1


def test_raises():
    with pytest.raises(ValueError):
        int("x")


def test_local_helper():
    local_check(1)


def test_imported_helper_through_another():
    relay(1)


def test_method_of_a_test_class(client):
    client.ask()


def test_child_checked():
    subprocess.run(["true"], check=True)


def test_only_calls_the_code():
    int("1")


def test_child_unchecked():
    subprocess.run(["true"])


def test_same_name_as_a_helper_it_does_not_import():
    check_answer = print
    check_answer(1)
"""


def test_flags_exactly_the_tests_without_an_assertion(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "test_sample.py").write_text(TESTS)
    done = subprocess.run([sys.executable, str(TOOL), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    flagged = sorted(line.split("::")[1].split()[0] for line in done.stderr.splitlines() if "::" in line)
    assert flagged == [
        "test_child_unchecked",
        "test_only_calls_the_code",
        "test_same_name_as_a_helper_it_does_not_import",
    ]
    assert "3 test(s) cannot fail" in done.stderr


def test_the_suite_has_no_test_without_an_assertion() -> None:
    done = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
