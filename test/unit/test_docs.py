"""The documentation says what the code does: README.md and docs/ compared with the code.

Generated pages and regions (tools/gen_docs.py) must be up to date; the hand-written pages are
checked where they state a contract: parameter names, defaults and when each is read, topics and
their types, launch arguments, ``tt-sam3`` flags, the paths they name, and every Python block runs.
A failure says what differs; the fix is the doc or, for generated text, a rerun of the generator.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def _load_gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "tools" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_docs = _load_gen_docs()


def pages() -> list[Path]:
    """README.md, CHANGELOG.md and every page under docs/."""
    return [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]


def hand_written(text: str) -> str:
    """``text`` without its generated regions (they are checked by regeneration)."""
    return gen_docs.GENERATED.sub("", text)


def section(text: str, heading: str) -> str:
    """The body of the Markdown section titled ``heading`` (up to the next heading of its level)."""
    match = re.search(rf"^(#+) {re.escape(heading)}\n(.*?)(?=^\1 |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    assert match, f"no section {heading!r}"
    return match.group(2)


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row in ``text`` (header and separator rows left out)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"[|\s:-]+", line):
            rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows[1:] if rows else rows


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# -- generated text -------------------------------------------------------------------------------


def test_generated_docs_are_up_to_date() -> None:
    """docs/parameters.md, the CLI help, the API signatures and the figures match the code."""
    diffs = gen_docs.stale(gen_docs.expected_files())
    assert not diffs, "run PYTHONPATH=$PWD .venv/bin/python tools/gen_docs.py\n" + "\n".join(diffs)


def test_every_parameter_has_a_phase() -> None:
    from tt_sam3_ros.ros.parameters import PARAMETERS

    assert {name: gen_docs.phase(name) for name in PARAMETERS}


# -- parameters -----------------------------------------------------------------------------------


def test_readme_parameter_table_matches_the_code() -> None:
    """Each row of the README's short table: a real parameter, its default, when it is read."""
    from tt_sam3_ros.ros.parameters import PARAMETERS

    rows = table_rows(section(README.read_text(), "Parameters most used"))
    assert rows
    for names, default, what in rows:
        for name in ticked(names):
            assert name in PARAMETERS, f"README names a parameter the node lacks: {name}"
            assert default.startswith(gen_docs.default_text(name).strip("`")) or default.startswith(
                gen_docs.default_text(name)
            ), f"README: {name} default {default!r}, code {gen_docs.default_text(name)}"
            assert gen_docs.phase(name).replace("at start (read-only)", "at start") in what, (
                f"README: {name} is read {gen_docs.phase(name)!r}; the row says {what!r}"
            )


def _parameters_named_in_commands(text: str) -> set[str]:
    """Parameter names in ``-p name:=``, ``ros2 param set /sam3 name`` and ``-p "name:=`` of code blocks."""
    blocks = "\n".join(re.findall(r"```(?:bash|sh)\n(.*?)```", text, flags=re.DOTALL))
    names = set(re.findall(r"""-p\s+["']?(\w+):=""", blocks))
    names |= set(re.findall(r"ros2 param (?:set|get|describe) /sam3 (\w+)", text))
    return names


def test_parameters_named_in_commands_exist() -> None:
    from tt_sam3_ros.ros.parameters import PARAMETERS

    for page in pages():
        unknown = _parameters_named_in_commands(hand_written(page.read_text())) - set(PARAMETERS)
        assert not unknown, f"{page.relative_to(REPO)} sets parameters the node lacks: {sorted(unknown)}"


def test_parameter_settings_in_the_text_name_real_parameters() -> None:
    """Every `name: value` the docs write (`depth: true`, `ttnn_prompt_path: chip`) is a parameter."""
    from tt_sam3_ros.ros.parameters import PARAMETERS

    for page in pages():
        for name in re.findall(r"`([a-z_]+): [^`]+`", hand_written(page.read_text())):
            assert name in PARAMETERS or name == "try", (
                f"{page.relative_to(REPO)}: `{name}: ...` is no parameter"
            )


# -- launch arguments -----------------------------------------------------------------------------


def declared_launch_arguments() -> set[str]:
    tree = ast.parse((REPO / "launch" / "sam3.launch.py").read_text())
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", "")) == "DeclareLaunchArgument"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


def test_readme_lists_every_launch_argument_and_no_other() -> None:
    declared = declared_launch_arguments()
    text = re.sub(r"\([^()]*\)", "", section(README.read_text(), "Launch arguments"))  # values, defaults
    listed = {name for name in ticked(text) if re.fullmatch(r"[a-z_]+", name)}
    assert declared <= listed, f"launch arguments missing from the README: {sorted(declared - listed)}"
    assert listed <= declared, f"README lists launch arguments that do not exist: {sorted(listed - declared)}"


def test_launch_lines_use_declared_arguments() -> None:
    declared = declared_launch_arguments()
    for page in pages():
        for line in re.findall(
            r"ros2 launch tt_sam3_ros sam3\.launch\.py[^\n]*", hand_written(page.read_text())
        ):
            for name in re.findall(r"\b(\w+):=", line):
                per_camera = name.endswith(("_image", "_depth", "_camera_info"))
                assert name in declared or per_camera, f"{page.name}: {name}:= in {line!r}"


# -- topics ---------------------------------------------------------------------------------------

PUBLISHING_CALLS = {
    "create_subscription",
    "create_publisher",
    "create_lifecycle_publisher",
    "_output",
    "_input",
    "_image_input",
}


def node_topics() -> dict[str, str]:
    """topic -> message type name, from the node's publisher and subscription calls."""
    topics = {}
    for path in (REPO / "tt_sam3_ros" / "ros").glob("*.py"):
        if path.name == "publish_images.py":
            continue
        for call in ast.walk(ast.parse(path.read_text())):
            if not isinstance(call, ast.Call) or getattr(call.func, "attr", "") not in PUBLISHING_CALLS:
                continue
            types = [a for a in call.args if isinstance(a, ast.Name) and a.id[:1].isupper()]
            names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            names += [
                a.args[0].value
                for a in call.args
                if isinstance(a, ast.Call) and a.args and isinstance(a.args[0], ast.Constant)
            ]
            if types and names:
                topic = f"~/{names[0]}" if call.func.attr in ("_output", "_input") else names[0]
                topics[topic] = types[0].id
    return topics


def documented_topics(text: str) -> dict[str, str]:
    """topic -> type name from a ``| topic | type | ...`` table (``a``, ``b`` | ``T1``, ``T2`` pair up)."""
    documented = {}
    for row in table_rows(text):
        topics = [t for t in ticked(row[0])]
        types = [t.split("/")[-1] for t in ticked(row[1]) if "/" in t]
        for k, topic in enumerate(topics):
            documented[topic] = types[k] if len(types) == len(topics) else types[0]
    return documented


def test_node_reference_lists_every_topic_with_its_type() -> None:
    code = node_topics()
    assert {"~/detections", "~/masks", "image", "/diagnostics"} <= set(code)  # the extraction works
    docs = documented_topics(section((REPO / "docs" / "node.md").read_text(), "Topics").split("\n### ")[0])
    assert docs == code


def test_readme_topics_exist_with_their_types() -> None:
    code = node_topics()
    readme = documented_topics(section(README.read_text(), "Topics"))
    assert {t: code.get(t) for t in readme} == readme
    assert set(code) - set(readme) <= {"image/compressed"}, "README's topic table misses a topic"


# -- the CLI --------------------------------------------------------------------------------------


def cli_flags() -> set[str]:
    help_text = gen_docs.cli_help()
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text)) | set(
        re.findall(r"\s(-[a-z])\b", help_text)
    )


def test_tt_sam3_flags_in_docs_exist() -> None:
    flags = cli_flags()
    for page in pages():
        for line in hand_written(page.read_text()).splitlines():
            if "tt-sam3" not in line:
                continue
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line):
                assert flag in flags, f"{page.relative_to(REPO)}: tt-sam3 has no {flag}: {line.strip()}"


# -- file references ------------------------------------------------------------------------------

TOP_FOLDERS = "tt_sam3_ros|test|tools|benchmarks|config|launch|requirements|docs|interfaces|resource"


def test_every_path_the_docs_name_exists() -> None:
    missing = []
    for page in pages():
        text = page.read_text()
        for path in re.findall(rf"`((?:{TOP_FOLDERS})/[\w./*-]*)`", text):
            if not any(REPO.glob(path.rstrip("/"))):
                missing.append(f"{page.relative_to(REPO)}: `{path}`")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" not in target and not (page.parent / target).exists():
                missing.append(f"{page.relative_to(REPO)}: link {target}")
    assert not missing, "\n".join(missing)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def test_every_anchor_the_docs_link_exists() -> None:
    broken = []
    for page in pages():
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text()):
            linked = (page.parent / target) if target else page
            if "://" in target or not linked.exists():
                continue
            anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", linked.read_text(), flags=re.MULTILINE)}
            if anchor not in anchors:
                broken.append(f"{page.relative_to(REPO)}: {target}#{anchor}")
    assert not broken, "\n".join(broken)


def test_nothing_cites_a_file_outside_the_repository() -> None:
    """No DESIGN.md, DEVICE_VALIDATION.md at the top, or ../shared: the facts live in docs/design/."""
    offenders = []
    for folder in ("tt_sam3_ros", "test", "tools", "benchmarks", "launch", "docs"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".sh", ".yaml") and path.name != "test_docs.py":
                text = path.read_text(encoding="utf-8", errors="replace")
                for needle in ("DESIGN.md", "DEVICE_VALIDATION.md", "../shared"):
                    if needle in text:
                        offenders.append(f"{path.relative_to(REPO)}: {needle}")
    for path in (README, REPO / "package.xml", REPO / "Makefile", REPO / "config" / "sam3.yaml"):
        if "DESIGN.md" in path.read_text():
            offenders.append(f"{path.relative_to(REPO)}: DESIGN.md")
    assert not offenders, "\n".join(offenders)


#: Words that make a page read as a log of its own development (outside generated tables).
DIARY = re.compile(
    r"load average|\bissues? #?\d+(?!\d)|the run before|an earlier run|this machine|\btoday\b|\bhere\b",
    flags=re.IGNORECASE,
)
#: Upstream tt-metal issues are sources, not this project's history.
SOURCES = re.compile(r"tt-metal[^.]*issues? \d+|p100a issues \d+")


def test_no_page_reads_as_a_development_diary() -> None:
    diary = []
    for page in pages():
        for number, line in enumerate(hand_written(page.read_text()).splitlines(), start=1):
            if DIARY.search(SOURCES.sub("", line)):
                diary.append(f"{page.relative_to(REPO)}:{number}: {line.strip()}")
    assert not diary, "\n".join(diary)


def test_readme_stays_short() -> None:
    assert len(README.read_bytes()) <= 15 * 1024


# -- examples -------------------------------------------------------------------------------------


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL)


@pytest.mark.parametrize("page", [p for p in pages() if python_blocks(p)], ids=lambda p: p.name)
def test_python_examples_run(page: Path, capsys) -> None:
    """Every Python block runs as written (the API examples on the tiny random model)."""
    for block in python_blocks(page):
        exec(compile(block, str(page), "exec"), {"__name__": "docs"})


def test_python_api_example_prints_the_presence_of_each_prompt(capsys) -> None:
    (block,) = [
        b for b in python_blocks(REPO / "docs" / "python_api.md") if "Sam3Segmenter.from_pretrained" in b
    ][:1]
    exec(compile(block, "python_api.md", "exec"), {"__name__": "docs"})
    assert "'car':" in capsys.readouterr().out  # the presence dict, printed whatever was found


# -- figures --------------------------------------------------------------------------------------

#: A time in milliseconds that a few words call a prediction of the cost model ("the cost model
#: predicts 13 ms", "models at 10.21 ms", "the 12.7 modelled ms"); goals and floors are not.
PREDICTED_MS = re.compile(
    r"(predict\w*|cost model|modell?ed|models? at|roofline)[^\w|]+(\w+[^\w|]+){0,6}?\d+(\.\d+)? ?ms\b"
    r"|\b\d+(\.\d+)? ms[^\w|]+(\w+[^\w|]+){0,3}?(predict\w*|modell?ed)|\b\d+(\.\d+)? modell?ed ms\b",
    flags=re.IGNORECASE,
)


def test_predicted_times_are_quoted_only_from_the_generated_figures() -> None:
    """A predicted time is written by the generator from benchmarks/results, never by hand, in the
    docs and in the code's comments, so two places cannot quote two different predictions."""
    quoted = []
    sources = [*pages(), *(REPO / "tt_sam3_ros").rglob("*.py"), *(REPO / "test" / "device").glob("*.py")]
    for path in sources:
        for number, line in enumerate(hand_written(path.read_text()).splitlines(), start=1):
            if PREDICTED_MS.search(line):
                quoted.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not quoted, "\n".join(quoted)


def test_the_readme_and_the_figures_quote_the_same_prediction() -> None:
    """The README's Blackhole speed is the frame table's 1-prompt row (one results file feeds both)."""
    from benchmarks.common import figures

    prediction = figures.blackhole_prediction()
    frame = figures.find("blackhole", "per frame: upload + image trace")
    readme = README.read_text()
    assert f"predicted {prediction['calibrated_frame_ms']:.1f} ms" in readme
    assert f"{prediction['frame_ms']:.1f} ms at the chip's peak" in readme
    assert frame["rows"][0][0] == "1" and float(frame["rows"][0][5]) == pytest.approx(prediction["frame_ms"])


def test_the_readmes_consumer_resolves_a_frame_begun_before_a_prompt_change() -> None:
    """The README's example, run on messages: a frame with the class id of a prompt the newest
    LabelInfo no longer lists (it was begun before the change) still resolves to its prompt."""
    msg = pytest.importorskip("vision_msgs.msg")
    from sensor_msgs.msg import Image

    pattern = r"```python\n(import numpy as np\n.*?def instances.*?)```"
    code = re.search(pattern, README.read_text(), re.DOTALL)
    assert code, "the README's consumer example is gone"
    example: dict[str, object] = {}
    exec(compile(code.group(1), "README.md", "exec"), example)  # the README's own code
    for class_id, name in ((0, "car"), (1, "bus")):  # prompts ['car'], then ['bus']
        entry = msg.VisionClass(class_id=class_id, class_name=name)
        example["on_label_info"](msg.LabelInfo(class_map=[entry]))
    hypothesis = msg.ObjectHypothesisWithPose()
    hypothesis.hypothesis.class_id, hypothesis.hypothesis.score = "0", 0.9
    detections = msg.Detection2DArray(detections=[msg.Detection2D(id="7", results=[hypothesis])])
    mask = Image(height=2, width=2, step=2, encoding="mono8", data=bytes([0, 1, 1, 0]))
    ((track_id, prompt, score, pixels),) = example["instances"](detections, mask)
    assert (track_id, prompt, score) == ("7", "car", pytest.approx(0.9))
    assert pixels.tolist() == [[False, True], [True, False]]
