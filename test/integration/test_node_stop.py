"""Stopping the node as ``ros2 launch`` does on Ctrl-C, whatever it is doing: loading, warming
up, mid-frame on a slow engine, cleaning up. Each test starts a node of its own (faulty_node,
whose delays stand in for a slow phase) and sends launch's sequence: the terminal's SIGINT and
the one launch forwards, SIGTERM ``sigterm_timeout`` seconds later, SIGKILL ``sigkill_timeout``
seconds after that, with the timeouts the launch file sets.

The promise: the device is released and the process exits 0 before launch's SIGKILL, and a
configure gives up between its phases instead of finishing them first.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from helpers.faulty_node import FAULT_PIXEL
from helpers.launch_command import launch_arguments, launch_file
from helpers.lifecycle import closes, lifecycle_node, reach
from helpers.sam3_client import make_image, running_node, scene, start_node
from ros_harness import HELPERS

from tt_sam3_ros.runtime.pipeline import ENGINE_ERROR_LIMIT

FAULTY_NODE = [sys.executable, str(HELPERS / "faulty_node.py")]
#: A node that serves: the tiny model with one prompt.
SERVING = {"model_id": "tiny-random", "prompts": "['car']"}
#: ``ros2 launch``'s own timeouts, which a node started without the package's launch file gets.
LAUNCH_DEFAULTS_S = (5.0, 5.0)
#: How long the stand-in's slow frame takes: longer than launch's defaults allow in all.
SLOW_FRAME_S = 12.0


def _launch_file_timeouts() -> tuple[float, float]:
    module = launch_file()
    return float(module.SIGTERM_TIMEOUT_S), float(module.SIGKILL_TIMEOUT_S)


def _wait_for_line(log_path: Path, text: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log_path.read_text():
        assert time.monotonic() < deadline, f"'{text}' never printed:\n{log_path.read_text()}"
        time.sleep(0.05)


def _stop_as_launch_does(process: subprocess.Popen, sigterm_after_s: float, sigkill_after_s: float) -> int:
    """Ctrl-C under ``ros2 launch``: SIGINT twice (the terminal's and launch's), SIGTERM
    ``sigterm_after_s`` later, SIGKILL ``sigkill_after_s`` after that. The exit status."""
    process.send_signal(signal.SIGINT)
    time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    for signum, after_s in ((signal.SIGTERM, sigterm_after_s), (signal.SIGKILL, sigkill_after_s)):
        try:
            return process.wait(timeout=after_s)
        except subprocess.TimeoutExpired:
            process.send_signal(signum)
    return process.wait(timeout=30)


def _assert_released_once_and_exited_0(exit_code: int, log: str) -> None:
    assert exit_code == 0, log
    assert log.count("engine released") == 1, log
    assert "never retrieved" not in log and "Traceback" not in log, log


@pytest.mark.parametrize(
    ("timeouts", "exit_code"),
    [(None, 0), (LAUNCH_DEFAULTS_S, -signal.SIGKILL)],
    ids=["launch-file-timeouts", "control-launch-defaults"],
)
def test_ctrl_c_with_a_slow_frame_in_flight_waits_for_it_and_releases(
    tmp_path: Path, timeouts: tuple[float, float] | None, exit_code: int
) -> None:
    """The frame in flight (a full-size frame on a CPU takes tens of seconds) finishes, then the
    engine is released and the node exits 0, inside the launch file's timeouts. The control:
    with launch's defaults the same stop ends in SIGKILL, so the timeouts are what save it."""
    log_path = tmp_path / "node.log"
    env = {"SAM3_FRAME_DELAY_S": str(SLOW_FRAME_S)}
    with running_node(SERVING, log_path, FAULTY_NODE, env=env) as sam3:
        sam3.send(make_image(scene(seed=1)))
        _wait_for_line(log_path, "frame delayed")
        status = _stop_as_launch_does(sam3.process, *(timeouts or _launch_file_timeouts()))
    log = log_path.read_text()
    assert status == exit_code, log
    if exit_code == 0:
        _assert_released_once_and_exited_0(status, log)


@pytest.mark.parametrize("sigterm_after_s", [0.5, 2.0], ids=["sigterm-0.5s-later", "sigterm-2s-later"])
def test_ctrl_c_while_loading_gives_up_the_later_phases(tmp_path: Path, sigterm_after_s: float) -> None:
    """A stop while the weights load: the load finishes, the engine is never opened and its
    30 s warm-up never starts; launch's SIGTERM arriving meanwhile does not kill the node."""
    log_path = tmp_path / "node.log"
    env = {"SAM3_BUILD_DELAY_S": "3", "SAM3_WARMUP_DELAY_S": "30", "SAM3_CLOSE_LOG": str(tmp_path / "closes")}
    process = start_node({"model_id": "tiny-random"}, log_path, FAULTY_NODE, env)
    try:
        _wait_for_line(log_path, "configuring:")
        status = _stop_as_launch_does(process, sigterm_after_s, _launch_file_timeouts()[1])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = log_path.read_text()
    assert status == 0, log
    assert "start given up: stopped after the weights loaded" in log, log
    assert "warmup delayed" not in log and "Traceback" not in log, log
    assert not (tmp_path / "closes").exists(), "no engine was opened, none to close"


def test_ctrl_c_during_the_warm_up_releases_the_engine_after_it(tmp_path: Path) -> None:
    """A stop during the warm-up (a first compile on a chip): it finishes, the engine is released
    once, exit 0, though launch's SIGTERM came meanwhile."""
    log_path = tmp_path / "node.log"
    env = {"SAM3_WARMUP_DELAY_S": "4", "SAM3_CLOSE_LOG": str(tmp_path / "closes")}
    process = start_node({"model_id": "tiny-random"}, log_path, FAULTY_NODE, env)
    try:
        _wait_for_line(log_path, "warmup delayed")
        status = _stop_as_launch_does(process, 1.0, 30.0)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = log_path.read_text()
    _assert_released_once_and_exited_0(status, log)
    assert len((tmp_path / "closes").read_text().splitlines()) == 1


def test_ctrl_c_while_a_lost_engine_is_released_exits_0(tmp_path: Path) -> None:
    """The engine failed ENGINE_ERROR_LIMIT frames in a row: the lifecycle's error path is closing
    a slow device on a thread of its own when Ctrl-C comes. The lifecycle shutdown cannot start
    from that transition, so the node releases directly: exit 0, one close, no traceback."""
    with lifecycle_node(tmp_path, {"SAM3_CLOSE_DELAY_S": "6"}) as sam3:
        reach(sam3, "active", transport="raw")
        sam3.wait_for_subscriber()
        for seed in range(ENGINE_ERROR_LIMIT):
            picture = scene(seed=seed)
            picture[0, 0] = FAULT_PIXEL
            sam3.send(make_image(picture))
            sam3.next_diagnostics(where=lambda s, n=seed + 1: int(s["engine_errors"]) >= n)
        _wait_for_line(sam3.log_path, "close delayed")
        status = _stop_as_launch_does(sam3.process, 2.0, 30.0)
        log = Path(sam3.log_path).read_text()
        assert status == 0, log
        assert "Traceback" not in log.split("the engine looks lost")[-1], log
        assert len(closes(sam3)) == 1


def test_a_frame_hung_in_the_engine_is_given_up_and_does_not_block_the_stop(tmp_path: Path) -> None:
    """A device call that never returns: the watchdog (here 1 x the start-up, at least 2 s) takes
    the only chip out as stuck, the node takes the engine-lost path without waiting for the
    call, says the device stays open, and Ctrl-C then exits 0. The engine is never
    closed (its thread is still in the call)."""
    log_path = tmp_path / "node.log"
    env = {"SAM3_FRAME_DELAY_S": "600", "SAM3_WATCHDOG": "1,2", "SAM3_CLOSE_LOG": str(tmp_path / "closes")}
    with running_node(SERVING, log_path, FAULTY_NODE, env=env) as sam3:
        sam3.send(make_image(scene(seed=1)))
        _wait_for_line(log_path, "engine stuck: not closed", timeout_s=120.0)
        # exit 0 inside launch's bound (SIGKILL after 120 s in all) proves the 600 s call was not awaited
        status = _stop_as_launch_does(sam3.process, *_launch_file_timeouts())
    log = log_path.read_text()
    assert status == 0, log
    assert "stuck: a frame has been in the engine for more than" in log, log
    assert "the engine looks lost" in log, log
    assert "engine released:" not in log and not (tmp_path / "closes").exists(), log


def test_the_launch_file_gives_the_stop_more_than_a_slow_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound the tests above rely on, as the launch file hands it to launch_ros's
    LifecycleNode (launch_ros stands in here: it has no wheel)."""
    made: list[dict[str, object]] = []
    actions = types.ModuleType("launch_ros.actions")
    actions.LifecycleNode = lambda **kwargs: made.append(kwargs)
    substitutions = types.ModuleType("launch.substitutions")
    substitutions.LaunchConfiguration = lambda name: f"<{name}>"
    for name, module in {
        "launch": types.ModuleType("launch"),
        "launch.substitutions": substitutions,
        "launch_ros": types.ModuleType("launch_ros"),
        "launch_ros.actions": actions,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    context = types.SimpleNamespace(launch_configurations=launch_arguments())
    launch_file()._sam3_node(context)
    (node,) = made
    sigterm_s, sigkill_s = float(node["sigterm_timeout"]), float(node["sigkill_timeout"])
    assert (sigterm_s, sigkill_s) == _launch_file_timeouts()
    assert sigterm_s >= SLOW_FRAME_S and sigterm_s + sigkill_s >= 2 * SLOW_FRAME_S
