"""Check the Blackhole code's ttnn calls against the real ttnn wheel, off-chip.

Runs inside .venv-ttnn (CPython 3.12 with PyPI's ttnn==0.81.1; tools/bootstrap_ttnn.sh makes
it). The list of calls is read from the code itself (an AST scan), never written by hand:
every attribute chain rooted at ``ttnn`` or ``self.ttnn`` (the engine binds the module, real
or emulated, to that name) and every method called on a name or attribute called ``device``
(checked against ttnn.MeshDevice) or ``tensor`` (ttnn.Tensor).

For each use it checks that the attribute exists in the real module, and for each call that
some overload of the real function accepts the number of positional arguments and every
keyword passed. Signatures come from nanobind's ``__nb_signature__`` for C++ operations and
classes, and from ``inspect`` for Python ones.

With ``--bfp8-dump PATH`` it also packs seeded random tensors as bfloat8_b with ttnn's own
host conversion (needs a mock cluster descriptor, written here, since no chip is present)
and saves inputs and decoded values, for the emulator's bit-for-bit comparison (the test
does that side: this environment has no torch).

Usage: .venv-ttnn/bin/python tools/ttnn_conformance.py [--json OUT] [--bfp8-dump OUT.npz] [PATH ...]
Exit status 0 when every use conforms, 1 otherwise; the JSON report lists each finding.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import re
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = (
    "tt_sam3_ros/engines/ttnn_engine.py",
    "tt_sam3_ros/engines/ttnn_warmup.py",
    "tt_sam3_ros/engines/ttnn_model",
)
#: Receivers whose method calls are checked against a ttnn class: the project names its device
#: `device` and a generic tensor `tensor`, so their methods are checked too.
RECEIVERS = {"device": "MeshDevice", "_device": "MeshDevice", "mesh_device": "MeshDevice", "tensor": "Tensor"}

# A single-chip p150 for UMD's mock mode: lets host conversions query tile sizes with no chip.
MOCK_P150 = """arch:
  0: blackhole
chips:
  {}
chip_unique_ids:
  0: 4476187513037
ethernet_connections:
  []
ethernet_connections_to_remote_devices:
  []
chips_with_mmio:
  - 0: 0
harvesting:
  0:
    noc_translation: true
    harvest_mask: 0
    dram_harvesting_mask: 0
    eth_harvesting_mask: 288
    pcie_harvesting_mask: 2
    l2cpu_harvesting_mask: 0
boards:
  -
    - board_id: 4476187513037
    - board_type: p150
    - chips:
        - 0
"""


@dataclass
class Use:
    """One place the code touches ttnn: `path` like "transformer.concatenate_heads"."""

    path: str
    where: str
    called: bool
    positional: int = 0
    keywords: list[str] = field(default_factory=list)
    star_args: bool = False
    receiver: str = "ttnn"


@dataclass
class Finding:
    use: Use
    problem: str


# scanning ---------------------------------------------------------------------------------------
def _chain(node: ast.AST) -> list[str] | None:
    """["ttnn", "transformer", "x"] for ttnn.transformer.x; None when not rooted at a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    if isinstance(node, ast.Attribute):
        return None
    return None


def _ttnn_path(node: ast.AST) -> str | None:
    """ "transformer.x" for ttnn.transformer.x or self.ttnn.transformer.x; None otherwise."""
    chain = _chain(node)
    if not chain or "ttnn" not in chain[:2]:
        return None
    rest = chain[chain.index("ttnn") + 1 :]
    return ".".join(rest) if rest else None


def _receiver_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def scan_file(path: Path) -> list[Use]:
    """Every ttnn attribute use and device method call in one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    uses: list[Use] = []
    called_ids: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        where = f"{rel}:{node.lineno}"
        keywords = [k.arg for k in node.keywords if k.arg is not None]
        star = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
        path = _ttnn_path(node.func)
        if path:
            uses.append(Use(path, where, True, len(node.args), keywords, star))
            called_ids.add(id(node.func))
            continue
        receiver = _receiver_name(node.func.value)
        if receiver in RECEIVERS:
            uses.append(
                Use(node.func.attr, where, True, len(node.args), keywords, star, receiver=RECEIVERS[receiver])
            )
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in called_ids:
            path = _ttnn_path(node)
            if path:
                uses.append(Use(path, f"{rel}:{node.lineno}", False))
    # Drop prefixes of longer chains (ttnn.transformer when ttnn.transformer.x is used).
    paths = {u.path for u in uses if u.receiver == "ttnn"}
    return [
        u
        for u in uses
        if u.called or u.receiver != "ttnn" or not any(p.startswith(u.path + ".") for p in paths)
    ]


def scan(paths: list[Path]) -> list[Use]:
    uses: list[Use] = []
    for root in paths:
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for file in files:
            uses.extend(scan_file(file))
    return uses


# signatures -------------------------------------------------------------------------------------
@dataclass
class Params:
    """What one overload accepts."""

    positional: list[str]
    keyword_only: list[str]
    required_keyword_only: list[str]
    var_positional: bool
    var_keyword: bool
    positional_only: int = 0

    def accepts(self, positional: int, keywords: list[str], star: bool) -> str | None:
        """None when a call with this shape binds; else why not."""
        if positional > len(self.positional) and not self.var_positional and not star:
            return f"{positional} positional arguments, at most {len(self.positional)} accepted"
        named = set(self.positional[self.positional_only :]) | set(self.keyword_only)
        unknown = [k for k in keywords if k not in named]
        if unknown and not self.var_keyword:
            return f"unknown keyword(s) {unknown}"
        doubled = [k for k in keywords if k in self.positional[:positional]]
        if doubled:
            return f"keyword(s) {doubled} also given positionally"
        missing = [k for k in self.required_keyword_only if k not in keywords]
        if missing and not star:
            return f"missing required keyword(s) {missing}"
        return None


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current))
    return [p.strip() for p in parts]


def parse_nb_signature(signature: str) -> Params:
    """Parameters of one nanobind overload: 'def f(self, a: T, *, b: U = \\0) -> R'."""
    match = re.match(r"\s*def\s+\w+\((.*)\)\s*(->.*)?$", signature, re.S)
    if not match:
        raise ValueError(f"unparsed signature {signature[:80]}")
    positional, keyword_only, required_kw = [], [], []
    var_pos = var_kw = False
    kw_only = False
    positional_only = 0
    for raw in _split_top(match.group(1)):
        name = raw.split(":", 1)[0].split("=", 1)[0].strip()
        has_default = "=" in raw.split(":", 1)[-1] or "=" in raw.split(":", 1)[0]
        if name == "self":
            continue
        if name == "/":
            positional_only = len(positional)
        elif name == "*":
            kw_only = True
        elif name.startswith("**"):
            var_kw = True
        elif name.startswith("*"):
            var_pos, kw_only = True, True
        elif kw_only:
            keyword_only.append(name)
            if not has_default:
                required_kw.append(name)
        else:
            positional.append(name)
    return Params(positional, keyword_only, required_kw, var_pos, var_kw, positional_only)


def params_from_inspect(obj: object) -> Params:
    sig = inspect.signature(obj)
    positional, keyword_only, required_kw = [], [], []
    var_pos = var_kw = False
    positional_only = 0
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional.append(p.name)
            if p.kind == p.POSITIONAL_ONLY:
                positional_only += 1
        elif p.kind == p.KEYWORD_ONLY:
            keyword_only.append(p.name)
            if p.default is p.empty:
                required_kw.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            var_pos = True
        else:
            var_kw = True
    return Params(positional, keyword_only, required_kw, var_pos, var_kw, positional_only)


#: A "name (type...):" entry of a docstring's "Keyword Args:" section.
_DOC_KEYWORD = re.compile(r"^\s+(\w+) \(", re.M)


def documented_keywords(doc: str | None) -> list[str]:
    """The names a nanobind overload's docstring lists under "Keyword Args:".

    Why: some bindings carry a hand-written signature string (nb::sig) that leaves out a keyword
    the binding really takes; open_device's omits num_command_queues, which 0.81.1 accepts (a
    call with it gets past argument binding to the cluster check, while a misspelt keyword is a
    TypeError). The docstring is the binding's own list, so its keywords count as accepted."""
    if not doc or "Keyword Args:" not in doc:
        return []
    section = doc.split("Keyword Args:", 1)[1]
    section = re.split(r"\n\s*\n", section, maxsplit=1)[0]
    return _DOC_KEYWORD.findall(section)


def _nb_overloads(nb: tuple) -> list[Params]:
    """Each nanobind overload (signature, docstring, ...) with its documented keywords added."""
    out = []
    for entry in nb:
        params = parse_nb_signature(entry[0])
        doc = entry[1] if len(entry) > 1 else None
        named = set(params.positional) | set(params.keyword_only)
        params.keyword_only += [k for k in documented_keywords(doc) if k not in named]
        out.append(params)
    return out


def overloads(obj: object) -> list[Params]:
    """Every overload the real object accepts when called; [] when none can be read."""
    function = getattr(obj, "function", None)
    if function is not None and type(obj).__name__ == "FastOperation":
        if getattr(obj, "is_cpp_operation", False):
            nb = getattr(type(function).__call__, "__nb_signature__", None)
        else:
            nb = getattr(function, "__nb_signature__", None)
        if nb:
            return _nb_overloads(nb)
        return [params_from_inspect(function)]
    nb = getattr(obj, "__nb_signature__", None)
    if nb is None and isinstance(obj, type):
        nb = getattr(obj.__init__, "__nb_signature__", None)
    if nb:
        return _nb_overloads(nb)
    try:
        return [params_from_inspect(obj)]
    except (TypeError, ValueError):
        return []


def resolve(module: object, dotted: str) -> object:
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def check(uses: list[Use], ttnn: object) -> tuple[list[Finding], int]:
    """Problems found, and how many uses were verified."""
    findings: list[Finding] = []
    verified = 0
    for use in uses:
        base = ttnn if use.receiver == "ttnn" else getattr(ttnn, use.receiver)
        try:
            obj = resolve(base, use.path)
        except AttributeError:
            owner = "ttnn" if use.receiver == "ttnn" else f"ttnn.{use.receiver}"
            findings.append(Finding(use, f"{owner}.{use.path} does not exist in ttnn 0.81.1"))
            continue
        if not use.called:
            verified += 1
            continue
        candidates = overloads(obj)
        if not candidates:
            findings.append(Finding(use, "signature cannot be read from the wheel: not verified"))
            continue
        reasons = [c.accepts(use.positional, use.keywords, use.star_args) for c in candidates]
        if all(r is not None for r in reasons):
            findings.append(Finding(use, "; ".join(sorted(set(r for r in reasons if r)))))
        else:
            verified += 1
    return findings, verified


# bfloat8_b --------------------------------------------------------------------------------------
def dump_bfp8(ttnn: object, out: Path) -> int:
    """Pack seeded random tensors with ttnn's host bfloat8_b conversion; returns how many."""
    import numpy as np

    rng = np.random.default_rng(20260)
    arrays: dict[str, np.ndarray] = {}
    cases = [
        ((1, 1, 32, 32), 1.0),
        ((2, 3, 40, 50), 3.0),
        ((1, 64, 96), 10.0),
        ((4, 32, 48), 0.02),
        ((1, 1, 33, 17), 1.0),
    ]
    for index, (shape, spread) in enumerate(cases):
        x = rng.standard_normal(shape) * np.exp(rng.standard_normal(shape) * spread)
        x = x.astype(np.float32)
        x.flat[::7] = 0.0
        x.flat[3::11] *= -1.0
        packed = ttnn.Tensor(x, ttnn.bfloat8_b, None, ttnn.TILE_LAYOUT)
        arrays[f"input_{index}"] = x
        arrays[f"packed_{index}"] = packed.to_numpy().astype(np.float32)
    np.savez(out, **arrays)
    return len(cases)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="files or folders to scan (default: the Blackhole engine)")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--bfp8-dump", type=Path, help="write ttnn-packed bfloat8_b samples here (.npz)")
    args = parser.parse_args(argv)

    paths = [REPO / p for p in (args.paths or DEFAULT_PATHS)]
    missing = [str(p) for p in paths if not p.exists()]
    uses = scan([p for p in paths if p.exists()])

    with tempfile.TemporaryDirectory() as scratch:
        desc = Path(scratch) / "p150_mock_cluster_desc.yaml"
        desc.write_text(MOCK_P150)
        os.environ.setdefault("TT_METAL_MOCK_CLUSTER_DESC_PATH", str(desc))
        os.environ.setdefault("TT_METAL_LOGGER_LEVEL", "ERROR")
        os.environ.setdefault("LOGURU_LEVEL", "WARNING")
        import ttnn

        findings, verified = check(uses, ttnn)
        samples = dump_bfp8(ttnn, args.bfp8_dump) if args.bfp8_dump else 0

    import importlib.metadata

    report = {
        "ttnn_version": importlib.metadata.version("ttnn"),
        "scanned": [str(p.relative_to(REPO)) for p in paths if p.exists()],
        "missing_paths": missing,
        "uses": len(uses),
        "distinct": sorted({(u.receiver, u.path) for u in uses}),
        "verified": verified,
        "findings": [{"problem": f.problem, **asdict(f.use)} for f in findings],
        "bfp8_samples": samples,
    }
    text = json.dumps(report, indent=2)
    if args.json:
        args.json.write_text(text)
    for finding in findings:
        print(
            f"{finding.use.where}: {finding.use.receiver}.{finding.use.path}: {finding.problem}",
            file=sys.stderr,
        )
    print(f"ttnn {report['ttnn_version']}: {len(uses)} uses, {verified} verified, {len(findings)} problems")
    return 1 if findings or missing else 0


if __name__ == "__main__":
    sys.exit(main())
