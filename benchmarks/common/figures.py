"""Figures the documentation quotes, rendered from benchmark results (benchmarks/results/*.json).

tools/gen_docs.py fills each ``<!-- BEGIN GENERATED: name -->`` region of README.md and docs/
with ``REGIONS[name]()``, so a quoted figure has one source: the results file a benchmark wrote
(``python -m benchmarks --only SECTION --results benchmarks/results``). Every table comes with
one metadata line (date, commit, machine, command).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"


def load(section: str) -> dict[str, Any]:
    """benchmarks/results/<section>.json."""
    return json.loads((RESULTS / f"{section}.json").read_text(encoding="utf-8"))


def find(section: str, title: str, occurrence: int = 0) -> dict[str, Any]:
    """The ``occurrence``-th table of a section whose title starts with ``title``.

    Raises:
        LookupError: no such table (the benchmark changed its titles: update the name here).
    """
    tables = [t for t in load(section)["tables"] if t["title"].startswith(title)]
    if len(tables) <= occurrence:
        raise LookupError(f"benchmarks/results/{section}.json has no table titled {title!r}...")
    return tables[occurrence]


def metadata_line(meta: dict[str, str], kind: str = "Measured") -> str:
    """One line: what kind of figure, when, at which commit, on which machine, by which command."""
    line = f"{kind} {meta['date']} at commit {meta['commit']} on {meta['machine']}, by `{meta['command']}`."
    if meta.get("source"):
        line += f" {meta['source']}"
    return line


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    def cell(text: object) -> str:
        return str(text).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


PREDICTED = "Predicted by the roofline cost model (benchmarks/blackhole/trace_cost.py), not measured:"
SIZED = "Sized by the real ttnn 0.81.1 library on a mock p150a (nothing computes):"
CALIBRATED = "Predicted by the calibrated cost model (benchmarks/blackhole/calibrated_cost.py), not measured:"
STAND_IN = (
    "Measured with a stand-in engine per chip that holds it for the calibrated cost model's "
    "per-frame prediction (benchmarks/node/stream_chips.py; no chip, no ROS):"
)
VALIDATED = (
    "The calibrated cost model against tt-metal's published Blackhole measurements "
    "(benchmarks/blackhole/validation.py):"
)


def table(section: str, title: str, kind: str = "Measured", occurrence: int = 0) -> str:
    """A results table as Markdown, its metadata line above it (the table's own, or its file's)."""
    found = find(section, title, occurrence)
    meta = found.get("meta") or load(section)["meta"]
    return f"{metadata_line(meta, kind)}\n\n{markdown_table(found['headers'], found['rows'])}"


def _number(text: str) -> float:
    return float(re.sub(r"[^0-9.eE+-]", "", text))


def _column(found: dict[str, Any], header: str) -> int:
    return next(k for k, h in enumerate(found["headers"]) if h.startswith(header))


def blackhole_prediction() -> dict[str, float]:
    """Per-frame figures in ms: image trace, 1-prompt frame and worst extra prompt, by the roofline
    (a floor: every op at the chip's peak) and by the calibrated model (tt-metal's measured
    efficiencies)."""
    frame = find("blackhole", "per frame: upload + image trace")
    first = frame["rows"][0]
    extra = [
        _number(r[_column(frame, "per extra prompt")])
        for r in frame["rows"]
        if r[_column(frame, "per extra")]
    ]
    calibrated = find("blackhole", "prompt traces and the frame, calibrated")
    frames = {int(r[0]): _number(r[_column(calibrated, "frame calibrated")]) for r in calibrated["rows"]}
    image = find("blackhole", "image trace, calibrated")
    image_row = next(r for r in image["rows"] if r[0] == "image trace")
    counts = sorted(frames)
    return {
        "image_ms": _number(first[_column(frame, "image trace")]),
        "prompt_ms": _number(first[_column(frame, "prompt trace")]),
        "frame_ms": _number(first[_column(frame, "frame ms, sequential")]),
        "extra_prompt_ms": max(extra),
        "calibrated_image_ms": _number(image_row[_column(image, "calibrated")]),
        "calibrated_frame_ms": frames[counts[0]],
        "calibrated_extra_prompt_ms": max(
            (frames[n] - frames[counts[0]]) / (n - counts[0]) for n in counts[1:]
        ),
    }


def blackhole_summary() -> str:
    """One paragraph for docs/blackhole.md."""
    p = blackhole_prediction()
    meta = load("blackhole")["meta"]
    return (
        f"Not measured on a chip. For a frame with one prompt on the chip prompt path, the cost models "
        f"predict {p['calibrated_frame_ms']:.1f} ms of device time with tt-metal's measured efficiencies "
        f"(`benchmarks/blackhole/calibrated_cost.py`; image trace {p['calibrated_image_ms']:.1f} ms, "
        f"{p['calibrated_extra_prompt_ms']:.1f} ms per extra prompt) and {p['frame_ms']:.1f} ms at the "
        f"chip's peak (the roofline of `benchmarks/blackhole/trace_cost.py`, a floor; image trace "
        f"{p['image_ms']:.1f} ms, {p['extra_prompt_ms']:.1f} ms per extra prompt): predictions, not "
        f"measurements ({meta['date']}, commit {meta['commit']}; [figures](figures/blackhole.md))."
    )


def readme_speed() -> str:
    """The README's expected-speed table: measured CPU figures, CUDA not measured, ttnn predicted."""
    model = find("model", "model: our torch engine")
    ours = {row[1]: row for row in model["rows"] if row[0].startswith("ours")}
    one = _column(model, "1 prompt")
    cpu_meta = load("model")["meta"]
    p = blackhole_prediction()
    bh_meta = load("blackhole")["meta"]
    rows = [
        [
            "`torch`, CPU",
            f"{_number(ours['float32'][one]):.0f} s float32, {_number(ours['bfloat16'][one]):.1f} s bfloat16 "
            "(1 prompt)",
            f"measured {cpu_meta['date']} on {cpu_meta['machine'].split(';')[0]}: "
            "[benchmarks](docs/benchmarks.md#the-model-our-torch-engine-against-transformers-documented-usage)",
        ],
        [
            "`torch`, CUDA",
            "not measured by this project; Meta reports about 30 ms per image on an H200",
            "the SAM 3 paper",
        ],
        [
            "`ttnn`, p150a",
            f"not measured; predicted {p['calibrated_frame_ms']:.1f} ms of device time (1 prompt, chip "
            f"prompt path; {p['frame_ms']:.1f} ms at the chip's peak), "
            f"+{p['calibrated_extra_prompt_ms']:.1f} ms per extra prompt",
            f"calibrated cost model and roofline, {bh_meta['date']}: [figures](docs/figures/blackhole.md)",
        ],
    ]
    return markdown_table(["engine", "per frame, full-size SAM 3", "source"], rows)


def tracker_chip_frames() -> str:
    """A frame of ``tracker: sam3`` on one chip, predicted: the detector's calibrated frame (1 prompt)
    plus, per tracked object, the calibrated tracker trace with a full memory."""
    chip = find("tracking", "tracking: sam3 mode on the chip")
    per_object = next(_number(r[-1]) for r in chip["rows"] if r[0] == "7" and r[1] == "per object and frame")
    detector = blackhole_prediction()["calibrated_frame_ms"]
    rows = [
        [str(n), f"{detector:.1f}", f"{n * per_object:.1f}", f"{detector + n * per_object:.1f}"]
        for n in (1, 4, 16)
    ]
    meta = load("tracking")["meta"]
    lines = [
        f"{CALIBRATED} the detector's frame from {metadata_line(load('blackhole')['meta'], 'the run of')}",
        f"The tracker trace per object from {metadata_line(meta, 'the run of')}",
        "",
        markdown_table(["objects", "detector ms (1 prompt)", "tracker ms", "frame ms"], rows),
    ]
    return "\n".join(lines)


#: Generated region name -> its Markdown.
REGIONS: dict[str, Callable[[], str]] = {
    "readme-speed": readme_speed,
    "blackhole-summary": blackhole_summary,
    "model": partial(table, "model", "model: our torch engine"),
    "host": partial(table, "host", "host: our work per frame"),
    "stream": partial(table, "stream", "stream: frames at"),
    "stream-deserialise": partial(table, "stream", "stream: frames at", occurrence=1),
    "cameras": partial(table, "stream", "stream: 1 and 3 cameras"),
    "cameras-summary": partial(table, "stream", "stream: 1 and 3 cameras", occurrence=1),
    "chips": partial(table, "stream", "stream: 8 cameras at 15 Hz each on", STAND_IN),
    "chips-cameras": partial(table, "stream", "stream: 8 cameras at 15 Hz each on", STAND_IN, occurrence=1),
    "tracking-identity": partial(table, "tracking", "tracking: identity"),
    "tracking-scenarios": partial(table, "tracking", "tracking: identity", occurrence=1),
    "tracking-cost": partial(table, "tracking", "tracking: cost per frame"),
    "tracking-sam3-cost": partial(table, "tracking", "tracking: sam3 mode, cost per frame"),
    "tracking-sam3-full-size": partial(table, "tracking", "tracking: sam3 mode at full size, the tracker"),
    "tracking-sam3-state": partial(table, "tracking", "tracking: sam3 mode at full size, the state"),
    "tracking-sam3-chip": partial(table, "tracking", "tracking: sam3 mode on the chip", CALIBRATED),
    "tracking-sam3-chip-frames": tracker_chip_frames,
    "exemplar-cost": partial(table, "exemplar", "exemplar: cost of exemplar boxes, torch engine"),
    "exemplar-chip": partial(table, "exemplar", "exemplar: chip prompt path, predicted", CALIBRATED),
    "fidelity-vit": partial(table, "fidelity", "ViT attention settings"),
    "blackhole-host": partial(table, "blackhole", "ttnn engine: host work per frame"),
    "blackhole-l1-harvested": partial(
        table, "blackhole", "per-core peak L1 by stage, NO_DISPATCH: harv", SIZED
    ),
    "blackhole-l1-unharvested": partial(
        table, "blackhole", "per-core peak L1 by stage, NO_DISPATCH: unh", SIZED
    ),
    "blackhole-largest-ops": partial(table, "blackhole", "ops nearest the L1 bank", SIZED),
    "blackhole-image-trace": partial(table, "blackhole", "image trace cost model", PREDICTED),
    "blackhole-dominant-ops": partial(table, "blackhole", "ops that take the most modelled time", PREDICTED),
    "blackhole-prompt-trace": partial(table, "blackhole", "prompt trace cost model", PREDICTED),
    "blackhole-frame": partial(table, "blackhole", "per frame: upload + image trace", PREDICTED),
    "blackhole-attention": partial(table, "blackhole", "fused attention chunk sizes", PREDICTED),
    "blackhole-validation": partial(table, "blackhole", "calibrated model against tt-metal", VALIDATED),
    "blackhole-image-calibrated": partial(table, "blackhole", "image trace, calibrated", CALIBRATED),
    "blackhole-image-calibrated-ops": partial(table, "blackhole", "image trace: the costliest", CALIBRATED),
    "blackhole-frame-calibrated": partial(
        table, "blackhole", "prompt traces and the frame, calibrated", CALIBRATED
    ),
    "blackhole-prompt-calibrated-ops": partial(table, "blackhole", "prompt trace, 1 prompt", CALIBRATED),
}
