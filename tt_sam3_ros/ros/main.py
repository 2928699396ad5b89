"""The node's process: rclpy start-up, the executor on its own thread, signals, and the exit code.

``main`` is the ``sam3_node`` entry point. This module imports the node, never the other way
round: ``node.py`` is the lifecycle node and nothing else.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import traceback

import rclpy
import rclpy.exceptions
import rclpy.logging
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.signals import SignalHandlerOptions

from tt_sam3_ros.core.errors import printable
from tt_sam3_ros.ros.node import NODE_NAME, Sam3Node
from tt_sam3_ros.runtime.pipeline import REASON_LIMIT

#: A second SIGINT/SIGTERM this soon after the first is the same request delivered twice
#: (``ros2 launch`` forwards one to a process that already got the process group's).
DUPLICATE_SIGNAL_WINDOW_S = 0.5


def run(args: list[str] | None = None) -> int:
    """Run the node until SIGINT/SIGTERM; exit 0 then, 1 when it could not start.

    rclpy's own signal handlers would shut the context down first, leaving the node
    unable to log to /rosout or announce its last transition; ours only ask the spin
    loop to stop, so the node goes through a real lifecycle shutdown while ROS is up.
    The executor spins from the start, on its own thread, so /diagnostics, parameter and
    lifecycle services answer while autostart's configure loads the model.
    """
    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    except Exception as error:  # rcl's RCLError, e.g. a -p value its YAML parser refuses
        print(f"[FATAL] [{NODE_NAME}]: cannot start: {_rcl_reason(error)}", file=sys.stderr)
        return 1
    stop = threading.Event()
    _handle_stop_signals(stop)
    node: Sam3Node | None = None
    exit_code = 0
    try:
        node = Sam3Node(stop_requested=stop)
        exit_code = _run(node, stop)
    except (
        ValueError,
        rclpy.exceptions.InvalidParameterTypeException,
        rclpy.exceptions.InvalidParameterValueException,
    ) as error:
        rclpy.logging.get_logger(NODE_NAME).fatal(f"invalid parameters: {printable(error, REASON_LIMIT)}")
        exit_code = 1
    finally:
        try:
            if node is not None:
                try:
                    node.shut_down()
                finally:
                    node.destroy_node()
        finally:
            rclpy.try_shutdown()
    return exit_code


def _rcl_reason(error: Exception) -> str:
    """rcl's message without its source locations, with a hint for YAML's booleans."""
    text = str(error).split(", at /")[0]
    text = text.removeprefix("failed to initialize rcl: ")
    if "Sequence should be of same type" in text:
        text += (
            "; YAML reads y, n, yes, no, on and off as booleans: quote each prompt, "
            "e.g. -p \"prompts:=['car', 'y']\""
        )
    return printable(text, 2 * REASON_LIMIT)


def _run(node: Sam3Node, stop: threading.Event) -> int:
    """Spin on a thread of its own; autostart here meanwhile; wait for ``stop``. Returns the exit code."""
    # A transition (its own group), the default group (services, parameters), the diagnostics
    # timer and the cameras' inputs (a group per camera; each callback only reads a header or
    # stores a message): one thread each.
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    failures: list[str] = []
    spinner = threading.Thread(
        target=_spin_until, args=(executor, stop, failures), name="sam3-executor", daemon=True
    )
    spinner.start()
    exit_code = 0
    try:
        if node.autostart and not node.start() and not stop.is_set():
            node.get_logger().fatal("could not start; see the error above")
            exit_code = 1
        else:
            while not stop.wait(0.1) and spinner.is_alive():
                pass
    finally:
        stop.set()
        # From here the node is stopping: the frame in flight finishes, then the engine is
        # released. A later signal has nothing left to cut short but that release.
        _ignore_stop_signals()
        spinner.join()
        _drain(node)
        executor.shutdown()
    if failures:
        node.get_logger().fatal(f"a callback failed; stopping:\n{failures[0]}")
        exit_code = 1
    return exit_code


def _spin_until(executor: MultiThreadedExecutor, stop: threading.Event, failures: list[str]) -> None:
    """Spin (transitions and diagnostics on two threads) until ``stop`` is set or ROS is down.

    An exception a callback raised (rclpy re-raises it here) ends the node with exit 1,
    as it did when the spin loop ran on the main thread; it is kept in ``failures``.
    """
    try:
        while not stop.is_set() and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
    except ExternalShutdownException:
        pass
    except Exception:
        failures.append(traceback.format_exc())
        stop.set()


def _drain(node: Sam3Node, timeout_s: float = 5.0) -> None:
    """Wait for the node's callbacks still running before the executor is shut down.

    Each finishing callback triggers the executor's guard condition, which ``shutdown``
    destroys: a callback still running then fails with "cannot use Destroyable because
    destruction was requested", printed at exit as an exception never retrieved. The node
    counts its own callbacks (``callbacks_in_flight``); no executor says which of its run.
    """
    if not node.wait_for_callbacks(timeout_s):
        rclpy.logging.get_logger(NODE_NAME).warning(
            f"{node.callbacks_running} callback(s) still running {timeout_s:.0f} s into the stop; "
            "shutting the executor down anyway"
        )


def _handle_stop_signals(stop: threading.Event) -> None:
    """Make the first SIGINT/SIGTERM stop the node gracefully, and every later one wait for it.

    The first sets ``stop``: the phase of a configure in flight (weights, engine, warm-up) or
    the frame in flight finishes, then the device is released. Later ones cannot cut that
    short: ``ros2 launch`` answers Ctrl-C with SIGINT, then SIGTERM after its ``sigterm_timeout``,
    and exiting on the SIGTERM would leave the chip open mid-upload or mid-trace. The first one
    arriving DUPLICATE_SIGNAL_WINDOW_S or more after the stop began says, once, what the stop is
    waiting for. SIGKILL (launch's ``sigkill_timeout``) remains the way to end it at once.
    Once the node is stopping, ``_ignore_stop_signals`` takes over.
    """
    first_s: list[float] = []
    told: list[bool] = []

    def on_signal(signum: int, _frame: object) -> None:
        now = time.monotonic()
        if not first_s:
            first_s.append(now)
            stop.set()
            return
        if told or now - first_s[0] < DUPLICATE_SIGNAL_WINDOW_S:
            return
        told.append(True)
        rclpy.logging.get_logger(NODE_NAME).warning(
            f"{signal.Signals(signum).name}: already stopping; the configure phase or frame in flight "
            "finishes, then the device is released (SIGKILL would leave it open)"
        )

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)


def _ignore_stop_signals() -> None:
    """Ignore SIGINT/SIGTERM from the moment the node starts stopping until the process exits.

    The stop is under way and ends with the device released and exit status 0; a further
    signal (``ros2 launch`` and a terminal each send one) must not cut it short. SIG_IGN
    rather than a Python handler: interpreter finalisation resets Python-level handlers to
    the default action, under which a signal arriving while the process tears down would
    kill it (status -2) after the release was logged. Main thread only, as ``signal`` requires.
    """
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def main(args: list[str] | None = None) -> int:
    """The ``sam3_node`` console script: run the node until SIGINT/SIGTERM; exit 0 then, 1 when it
    could not start."""
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
