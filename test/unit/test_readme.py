"""The README's Python snippet runs as written (on the tiny random model)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_a_python_example() -> None:
    assert any("Sam3Segmenter.from_pretrained" in block for block in python_blocks())


def test_readme_python_examples_run(capsys) -> None:
    for block in python_blocks():
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    assert "'car':" in printed  # the presence dict, printed whatever was found
