"""The instrumented node (helpers/faulty_node.py) with autostart false, and the way tests drive
it through its lifecycle services (the services ``ros2 lifecycle set`` calls)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers.sam3_client import Sam3Client, running_node
from lifecycle_msgs.msg import Transition
from ros_harness import HELPERS

PROMPTS = ["cup"]
NODE_PARAMS = {
    "model_id": "tiny-random",
    "prompts": str(PROMPTS),
    "threshold": "0.0",
    "max_instances": "4",
    "autostart": "false",
}


@contextmanager
def lifecycle_node(folder: Path, env: dict[str, str] | None = None) -> Iterator[Sam3Client]:
    """The instrumented node, autostart false, its close() lines in ``folder``/closes.log;
    ``env`` adds to its environment (faulty_node's delays)."""
    program = [sys.executable, str(HELPERS / "faulty_node.py")]
    env = {"SAM3_CLOSE_LOG": str(folder / "closes.log"), **(env or {})}
    with running_node(
        NODE_PARAMS, folder / "node.log", program, wait_for_subscription=False, env=env
    ) as client:
        client.close_log = folder / "closes.log"
        yield client


#: The transition that moves the node one step toward each state, from each state.
TOWARD = {
    ("unconfigured", "inactive"): Transition.TRANSITION_CONFIGURE,
    ("unconfigured", "active"): Transition.TRANSITION_CONFIGURE,
    ("inactive", "active"): Transition.TRANSITION_ACTIVATE,
    ("inactive", "unconfigured"): Transition.TRANSITION_CLEANUP,
    ("active", "inactive"): Transition.TRANSITION_DEACTIVATE,
    ("active", "unconfigured"): Transition.TRANSITION_DEACTIVATE,
}


def reach(sam3: Sam3Client, state: str, transport: str | None = None) -> None:
    """Drive the node to ``state`` through its lifecycle services; with ``transport``, also
    serve that transport (set while inactive, where the node takes it)."""
    current = sam3.state()
    if transport is not None and sam3.get_parameter("transport") != transport:
        if current == "active":
            assert sam3.transition(Transition.TRANSITION_DEACTIVATE)
            current = "inactive"
        assert sam3.set_parameter("transport", transport).successful
    while current != state:
        assert sam3.transition(TOWARD[(current, state)]), f"{current} -> {state}"
        current = sam3.state()


def closes(sam3: Sam3Client) -> list[str]:
    path = Path(sam3.close_log)
    return path.read_text().splitlines() if path.exists() else []
