"""The Blackhole code's ttnn calls against the real ttnn 0.81.1 wheel, and bfloat8_b bit-exactness.

The check runs as a subprocess in the interpreter that has the wheel (the suite's own in the
ubuntu24.04 row, else .venv-ttnn from `make ttnn-env`); this side compares its bfloat8_b packing with the
emulator's, since only this environment has torch.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from ttnn_env import ttnn_python

#: The real ttnn wheel runs these (the ubuntu24.04 row; other rows deselect them).
pytestmark = pytest.mark.ttnn_wheel

REPO = Path(__file__).resolve().parents[3]
TOOL = REPO / "tools" / "ttnn_conformance.py"
SAMPLE = Path(__file__).parent / "fixtures" / "conformance_sample.py"


def _ttnn_python() -> Path:
    return ttnn_python("ttnn conformance")


def _run(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp / "report.json"
    done = subprocess.run(
        [str(_ttnn_python()), str(TOOL), "--json", str(report), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.exists(), done.stderr[-3000:]
    return done, json.loads(report.read_text())


@pytest.fixture(scope="module")
def project_check(tmp_path_factory):
    """One run over the engine's code, with the bfloat8_b samples."""
    tmp = tmp_path_factory.mktemp("conformance")
    done, report = _run(tmp, "--bfp8-dump", str(tmp / "bfp8.npz"))
    return done, report, tmp / "bfp8.npz"


def test_checker_reports_exactly_the_bad_calls(tmp_path):
    done, report = _run(tmp_path, str(SAMPLE.relative_to(REPO)))
    bad_lines = {i for i, line in enumerate(SAMPLE.read_text().splitlines(), 1) if "# BAD" in line}
    flagged = {int(f["where"].rsplit(":", 1)[1]) for f in report["findings"]}
    assert flagged == bad_lines, report["findings"]
    assert done.returncode == 1


def test_engine_calls_exist_and_take_their_keywords(project_check):
    done, report, _ = project_check
    assert report["ttnn_version"] == "0.81.1"
    assert not report["missing_paths"], report["missing_paths"]
    problems = "\n".join(f"{f['where']}: {f['path']}: {f['problem']}" for f in report["findings"])
    assert not report["findings"], problems
    # The scan really saw the engine: a handful of uses would mean it looked in the wrong place.
    assert report["verified"] >= 40, report
    assert done.returncode == 0


def test_emulator_bfloat8_b_equals_ttnn_host_packing(project_check):
    from ttnn_emulator import quantize_bfloat8_b

    _, report, dump = project_check
    samples = np.load(dump)
    assert report["bfp8_samples"] == len([k for k in samples.files if k.startswith("input_")]) >= 5
    for key in sorted(k for k in samples.files if k.startswith("input_")):
        index = re.sub(r"\D", "", key)
        values = torch.from_numpy(samples[key])
        packed_by_ttnn = torch.from_numpy(samples[f"packed_{index}"])
        emulated = quantize_bfloat8_b(values)
        mismatched = int((emulated.view(torch.int32) != packed_by_ttnn.view(torch.int32)).sum())
        assert mismatched == 0, f"{key} {tuple(values.shape)}: {mismatched} values differ"


#: Emulator helpers with no ttnn counterpart, and mark_corruptible: a newer ttnn's call (0.81.1
#: has none; the engine does not call it).
EMULATOR_ONLY = {"quantize", "quantize_bfloat8_b", "reset", "mark_corruptible"}
_SIGNATURES = """
import json, sys
sys.path.insert(0, "tools")
import ttnn, ttnn_conformance as tc
out = {}
for name in json.loads(sys.argv[1]):
    try:
        out[name] = [vars(p) for p in tc.overloads(tc.resolve(ttnn, name))]
    except AttributeError:
        out[name] = None
print(json.dumps(out))
"""


def _emulated_functions() -> dict[str, object]:
    import inspect

    import ttnn_emulator

    found = {
        name: getattr(ttnn_emulator, name)
        for name in ttnn_emulator.__all__
        if inspect.isfunction(getattr(ttnn_emulator, name)) and name not in EMULATOR_ONLY
    }
    for namespace in ("transformer", "experimental", "tools.trace_allocation_tracker"):
        module = ttnn_emulator
        for part in namespace.split("."):
            module = getattr(module, part)
        found.update({f"{namespace}.{name}": fn for name, fn in vars(module).items() if callable(fn)})
    return {name: fn for name, fn in found.items() if inspect.isfunction(fn)}


def test_emulator_signatures_accept_no_more_than_the_real_ones():
    """The emulator refuses what ttnn refuses: no **kwargs, and every parameter it takes (by name,
    and positionally where it allows that) is one the real function takes the same way."""
    import inspect

    functions = _emulated_functions()
    assert {
        "linear",
        "layer_norm",
        "transformer.scaled_dot_product_attention",
        "experimental.rotary_embedding",
        "record_event",
    } <= set(functions)
    done = subprocess.run(
        [str(_ttnn_python()), "-c", _SIGNATURES, json.dumps(sorted(functions))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    real = json.loads(done.stdout.strip().splitlines()[-1])
    problems = []
    for name, fn in sorted(functions.items()):
        params = inspect.signature(fn).parameters.values()
        if real[name] is None:
            problems.append(f"{name}: not in ttnn")
            continue
        if any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params):
            problems.append(f"{name}: takes *args or **kwargs")
            continue
        positional = [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
        keyword = [p.name for p in params if p.kind == p.KEYWORD_ONLY]

        def fits(overload: dict, positional: list[str] = positional, keyword: list[str] = keyword) -> bool:
            real_positional = [n.lstrip("\\*") for n in overload["positional"] if n.strip("\\*")]
            named = set(real_positional[overload["positional_only"] :]) | set(overload["keyword_only"])
            return positional == real_positional[: len(positional)] and set(keyword) <= named

        if not any(fits(o) for o in real[name]):
            problems.append(f"{name}{inspect.signature(fn)} vs real {real[name]}")
    assert not problems, "\n".join(problems)
