"""Starting the node wrong: it must stop with a message a person can act on (waited for up to 60 s,
a liveness bound: how fast it stops is not measured here). And stopping it with signals, while it
configures, while it serves and mid-stream: each test starts a node of its own.

These run the installed ``sam3_node`` console script with config/sam3.yaml, exactly as
``make run`` does, and never reach the network (HF_HUB_OFFLINE is set by the suite).
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.sam3_client import make_image, running_node, scene, stamp_now, start_node

REPO = Path(__file__).resolve().parents[2]
SAM3_NODE = Path(sys.executable).parent / "sam3_node"
PARAMS_FILE = REPO / "config" / "sam3.yaml"


def _run_until_exit(
    params: dict[str, str], tmp_path: Path, env: dict[str, str] | None = None, params_file: bool = True
) -> tuple[int, str, float]:
    """Start the console script with the params file and ``params``; wait for it to exit.

    Without ``params_file``: rcl drops a ``-p`` value whose type differs from the file's, so a
    wrong type given on the command line only reaches the node without the file.
    """
    if not SAM3_NODE.exists():
        pytest.skip(f"{SAM3_NODE} is not installed (pip install -e . makes it)")
    program = [str(SAM3_NODE)]
    if params_file:
        program += ["--ros-args", "--params-file", str(PARAMS_FILE)]
    log_path = tmp_path / "node.log"
    started = time.monotonic()
    process = start_node(params, log_path, program, env)
    try:
        exit_code = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"the node did not stop within 60 s:\n{log_path.read_text()}")
    return exit_code, log_path.read_text(), time.monotonic() - started


def test_missing_weights_stop_make_run_with_the_actionable_message(tmp_path: Path) -> None:
    # An empty Hugging Face cache and no network: the default facebook/sam3 cannot be had.
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    exit_code, log, _ = _run_until_exit({}, tmp_path, env)
    assert exit_code == 1, log
    assert "cannot configure: SAM 3 weights facebook/sam3" in log
    assert "hf download facebook/sam3" in log and "weights_dir" in log
    assert "Traceback" not in log


def test_engine_ttnn_without_ttnn_stops_with_the_reason_alone(tmp_path: Path) -> None:
    """An expected start-up error (TT-NN not installed) is one message; its traceback is DEBUG only."""
    if importlib.util.find_spec("ttnn") is not None:
        pytest.skip("ttnn is installed in this environment")
    exit_code, log, _ = _run_until_exit({"model_id": "tiny-random", "engine": "ttnn"}, tmp_path)
    assert exit_code == 1, log
    assert "cannot configure: the ttnn engine needs TT-NN" in log and "No module named 'ttnn'" in log
    assert "Traceback" not in log and "importlib" not in log, log


def test_no_network_stops_make_run_with_the_actionable_message(tmp_path: Path) -> None:
    # A closed local port stands in for "no network": nothing leaves this machine.
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}
    exit_code, log, _ = _run_until_exit({}, tmp_path, env)
    assert exit_code == 1, log
    assert "cannot configure:" in log and "weights_dir" in log
    assert "Traceback" not in log


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"prompts": "['car', '']"}, "invalid parameters: prompts rejected: prompt 1 is empty"),
        ({"prompts": "car"}, "prompts must be a list of strings, e.g. ['car', 'person']"),
        ({"threshold": "high"}, "threshold must be a number, e.g. 0.5"),
        ({"threshold": "1.5"}, "threshold out of range Min: 0.0, Max: 1.0"),
        ({"engine": "tpu"}, "engine must be one of auto, torch, ttnn"),
        ({"qos_depth": "0"}, "qos_depth out of range"),
        ({"depth_max_skew_s": "5"}, "depth_max_skew_s out of range Min: 0.0, Max: 1.0"),
    ],
    ids=[
        "blank-prompt",
        "prompts-as-string",
        "threshold-word",
        "threshold-1.5",
        "bad-engine",
        "qos-depth-0",
        "integer-skew-5",
    ],
)
def test_invalid_startup_parameters_stop_the_node_with_the_reason(
    tmp_path: Path, params: dict[str, str], reason: str
) -> None:
    exit_code, log, _ = _run_until_exit({"model_id": "tiny-random", **params}, tmp_path, params_file=False)
    assert exit_code == 1, log
    assert reason in log
    assert "Traceback" not in log


def test_a_command_line_rclpy_cannot_parse_stops_with_one_readable_line(tmp_path: Path) -> None:
    # YAML reads y as a boolean, and rcl refuses a list mixing strings and booleans.
    exit_code, log, _ = _run_until_exit({"model_id": "tiny-random", "prompts": "[car, y]"}, tmp_path)
    assert exit_code == 1, log
    assert "Traceback" not in log
    # rcl itself logs "Failed to parse global arguments" first; the node adds one line.
    lines = [line for line in log.splitlines() if "[sam3]" in line]
    assert len(lines) == 1 and len(log.splitlines()) <= 2, log
    assert "prompts:=[car, y]" in lines[0] and "quote" in lines[0], lines[0]


def test_without_prompts_the_node_waits_and_says_how_to_set_them(tmp_path: Path) -> None:
    # config/sam3.yaml leaves prompts unset: the first thing `make run MODEL=tiny-random` shows.
    if not SAM3_NODE.exists():
        pytest.skip(f"{SAM3_NODE} is not installed (pip install -e . makes it)")
    program = [str(SAM3_NODE), "--ros-args", "--params-file", str(PARAMS_FILE)]
    params = {"model_id": "tiny-random", "threshold": "0.0", "max_instances": "3"}
    with running_node(params, tmp_path / "node.log", program) as sam3:
        waiting = sam3.next_diagnostics(where=lambda s: s["state"] == "active")
        assert waiting["_level"] == 1 and "ros2 param set /sam3 prompts" in waiting["_message"]
        frame = make_image(scene(seed=1))
        key = stamp_now(frame)
        sam3.send(frame)
        assert sam3.no_answer(key, wait_s=2.0)
        counted = sam3.next_diagnostics(where=lambda s: int(s["frames_received"]) >= 1)
        assert counted["frames_processed"] == "0"

        assert sam3.set_parameter("prompts", ["bottle"]).successful
        detections, _ = sam3.ask(make_image(scene(seed=2)))
        assert [sam3.prompt_of(d) for d in detections.detections] == ["bottle"] * 3


def _wait_for_log(log_path: Path, text: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log_path.read_text():
        assert time.monotonic() < deadline, f"'{text}' never logged:\n{log_path.read_text()}"
        time.sleep(0.05)


FAULTY_NODE = [sys.executable, str(Path(__file__).parent / "helpers" / "faulty_node.py")]


@pytest.mark.parametrize(
    "gaps_s",
    [(), (0.02,), (1.5,)],
    ids=["one-signal", "duplicate-20ms-later", "second-signal-1.5s-later"],
)
def test_sigterm_while_configuring(tmp_path: Path, gaps_s: tuple[float, ...]) -> None:
    """A SIGTERM while the weights load, alone or followed by a second one (20 ms later, as ``ros2
    launch`` forwards one; 1.5 s later, as a user repeats it): the load finishes, the engine is
    never opened, exit 0."""
    log_path = tmp_path / "node.log"
    # The build is slowed so the 1.5 s gap falls inside the configure.
    process = start_node({"model_id": "tiny-random"}, log_path, FAULTY_NODE, {"SAM3_BUILD_DELAY_S": "3"})
    try:
        _wait_for_log(log_path, "configuring:")
        process.send_signal(signal.SIGTERM)
        for gap_s in gaps_s:
            time.sleep(gap_s)
            process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = log_path.read_text()
    assert "start given up: stopped after the weights loaded" in log, log
    assert "Traceback" not in log


#: A node that serves: the tiny model with one prompt.
SERVING = {"model_id": "tiny-random", "prompts": "['car']"}


#: Repeat the second SIGINT this often until the process exits: it then lands in every phase of the
#: stop (the frame in flight, the release, destroying the node, interpreter teardown).
BURST_PERIOD_S = 0.02


def _signal_until_exit(process: subprocess.Popen, signum: int, period_s: float, limit_s: float) -> int:
    """Send ``signum`` every ``period_s`` until ``process`` exits; its exit status."""
    deadline = time.monotonic() + limit_s
    while process.poll() is None and time.monotonic() < deadline:
        try:
            process.send_signal(signum)
        except ProcessLookupError:  # exited between poll and send
            break
        time.sleep(period_s)
    return process.wait(timeout=limit_s)


@pytest.mark.parametrize(
    "gaps_s",
    [(), (0.0,), (0.02,), (0.2,), (1.0,)],
    ids=["one-sigint", "pair-back-to-back", "pair-20ms", "pair-200ms", "pair-1s"],
)
def test_sigint_while_serving_releases_the_engine_and_exits_0(
    tmp_path: Path, gaps_s: tuple[float, ...]
) -> None:
    """One SIGINT, or a second at several gaps after it, as a terminal and ``ros2
    launch`` both send one: the engine is released once and the process exits 0, whenever the
    later signal arrives in the stop."""
    with running_node(SERVING, tmp_path / "node.log") as sam3:
        sam3.ask(make_image(scene(seed=1)))
        sam3.process.send_signal(signal.SIGINT)
        for gap_s in gaps_s:
            time.sleep(gap_s)
            sam3.process.send_signal(signal.SIGINT)
        exit_code = sam3.process.wait(timeout=30)
        log = (tmp_path / "node.log").read_text()
    _assert_released_once_and_exited_0(exit_code, log)


def test_sigints_throughout_the_stop_never_kill_the_node(tmp_path: Path) -> None:
    """SIGINT after SIGINT every 20 ms from the first until the process is gone: each phase of the
    stop, the interpreter's teardown after the release included, sees one; none cuts it short."""
    with running_node(SERVING, tmp_path / "node.log") as sam3:
        sam3.ask(make_image(scene(seed=1)))
        exit_code = _signal_until_exit(sam3.process, signal.SIGINT, BURST_PERIOD_S, limit_s=30)
        log = (tmp_path / "node.log").read_text()
    _assert_released_once_and_exited_0(exit_code, log)


def _assert_released_once_and_exited_0(exit_code: int, log: str) -> None:
    assert exit_code == 0, log
    assert log.count("engine released") == 1, log
    assert log.index("releasing the engine") < log.index("engine released"), log
    assert "never retrieved" not in log and "Traceback" not in log, log
