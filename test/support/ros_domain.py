"""The ROS domain each pytest-xdist worker uses, so that concurrent tests' nodes never meet."""

from __future__ import annotations

#: Domain ids the suite uses: 1..100 (every one of them valid with localhost-only discovery).
DOMAINS = 100


def worker_domain_id(run_domain: int, worker: str) -> int:
    """The run's domain for a plain pytest (no worker), else the worker's own.

    Workers are named gw0, gw1, ... by pytest-xdist and share the run's network namespace, so two
    tests' nodes (both /sam3) in one domain would see each other's topics; worker n takes the n-th
    domain after the run's, wrapping within 1..100.
    """
    if not worker.startswith("gw"):
        return run_domain
    return (run_domain - 1 + int(worker[2:])) % DOMAINS + 1
