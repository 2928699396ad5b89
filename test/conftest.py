"""Suite-wide guards: ROS 2 discovery never leaves this machine, whoever starts pytest.

`make test` already runs pytest through tools/ros_sandbox.sh; these defaults cover a
plain `pytest` call, and every child process the tests start inherits them.

test/support (the suite's helpers: frames, compare, random_weights, the ttnn emulator) is put
on sys.path here, so any test imports them by module name.

`--reverse` runs the collected tests backwards (order independence). Under pytest-xdist each
worker gets a ROS domain of its own.

Property tests run under one hypothesis profile, loaded here: no per-example deadline (a loaded
CI machine makes any wall-clock bound flaky) and no too-slow health check; a test file sets only
how many examples it wants.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

SUPPORT = Path(__file__).resolve().parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

from ros_domain import worker_domain_id, worker_threads  # noqa: E402 (test/support is on sys.path from here)

os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOCALHOST_ONLY"] = "1"
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))
# pytest-xdist's workers (`make test` runs two) share one network namespace and would share one
# domain: two tests' nodes, both /sam3, would then see each other's topics. Each worker takes the
# next domain id after the run's own.
os.environ["ROS_DOMAIN_ID"] = str(
    worker_domain_id(int(os.environ["ROS_DOMAIN_ID"]), os.environ.get("PYTEST_XDIST_WORKER", ""))
)
# Each worker's share of the cores for torch's (OpenMP's) threads, and for the node processes it
# starts: with every worker using all the cores, their spinning threads starve each other (the
# emulated-chip tests took 4x as long on two workers as in one process).
if os.environ.get("PYTEST_XDIST_WORKER"):
    _share = str(worker_threads(os.cpu_count() or 1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_variable, _share)
# Nothing in the suite may reach a model hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reverse",
        action="store_true",
        help="run the collected tests in reverse order: a test that leans on another's side effects "
        "(a fixture it closes, state it leaves) fails",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--reverse: after pytest has grouped the tests by their fixtures, reverse the whole order."""
    if config.getoption("--reverse"):
        items.reverse()
