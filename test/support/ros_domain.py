"""What each pytest-xdist worker takes for itself: a ROS domain (so that concurrent tests' nodes
never meet) and its share of the cores."""

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


def worker_threads(cores: int, workers: int) -> int:
    """Threads each of ``workers`` may use on ``cores`` (at least one): more, and their OpenMP
    threads spin against each other's."""
    return max(1, cores // max(1, workers))
