"""What a node process needs to run the ttnn engine on the real ttnn wheel with MOCK p150a chips.

tools/ttnn_mock/toolchain.py lays the mock out in a folder (a cluster descriptor of one or more
p150 boards with a chosen harvest mask, a runtime root with the stand-in SFPI compiler, a private
kernel cache) and returns the environment variables that select it. tt-metal reads them when ttnn
is imported, so they must be in the node's environment at its start: the node process gets them,
never the test process (which imports no ttnn). Where the wheel is absent or is not the one the
stand-in was written for, ``cannot_run`` (skip here, fail on CI) with the toolchain's reason.

The engine turns its trace off on a mock cluster (device.find_mock_cluster: ttnn 0.81.1 segfaults
in wait_for_event and trace capture there), and nothing computes: every device output reads back
as zeros (docs/design/facts.md, Mock p150a).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from ttnn_env import cannot_run

REPO = Path(__file__).resolve().parents[3]
TOOLS = REPO / "tools"
#: What in a node's log says the library or the process failed, whatever tt-metal's logger level:
#: closing chips opened one call each (tied in ttnn 0.81.1) logs "TT_THROW: Cannot close device 0
#: that has not been initialized!", a crash inside tt-metal "Segmentation fault".
FAILURE_MARKS = ("Traceback", "Segmentation fault", "TT_THROW")
#: Two Tensix columns off: the 11x10 compute grid (120 cores) of a real p150a.
HARVESTED = 3


def mock_environment(folder: Path, boards: int = 1, harvest_mask: int = HARVESTED) -> dict[str, str]:
    """The environment variables that give a node process ``boards`` mock p150a chips, laid out
    in ``folder`` (also the node's working folder: tt-metal writes generated/ there); the
    repository on PYTHONPATH, since the node does not start in it."""
    if importlib.util.find_spec("ttnn") is None:
        cannot_run(f"the node on a mock p150a not run: ttnn is not installed for {sys.executable}")
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    from ttnn_mock import toolchain

    try:
        env = toolchain.build(folder, harvest_mask, boards=boards)
    except toolchain.MockUnavailableError as error:
        cannot_run(f"the node on a mock p150a not run: {error}")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    return env
