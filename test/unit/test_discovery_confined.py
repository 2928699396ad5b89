"""The suite's ROS 2 traffic cannot leave this machine: `make test` is safe anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ros_domain import worker_domain_id, worker_threads
from ttnn_env import cannot_run

REPO = Path(__file__).resolve().parents[2]
SANDBOX = REPO / "tools" / "ros_sandbox.sh"


@pytest.fixture
def in_sandbox() -> None:
    """Only inside tools/ros_sandbox.sh's private network namespace; elsewhere skipped, and on CI
    failed: a CI run that cannot confine discovery must not pass."""
    if not os.environ.get("TT_SAM3_IN_NETNS"):
        cannot_run(
            "discovery confinement not checked: not started through tools/ros_sandbox.sh as root "
            "(no private network namespace)"
        )


# A ROS 2 participant that publishes for a few seconds, as the suite's node processes do.
_PARTICIPANT = (
    "import time, rclpy; from std_msgs.msg import String; rclpy.init(); "
    "node = rclpy.create_node('confinement_probe'); node.create_publisher(String, 'chatter', 1); "
    "time.sleep(30)"
)


def _interfaces(pid: int | str) -> list[str]:
    # /proc/PID/net/dev lists the interfaces of that process's network namespace.
    lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines)


def _udp_sockets(pid: int) -> list[str]:
    """Local addresses of the UDP sockets ``pid`` holds, found in its own namespace's tables."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("udp", "udp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                found.append(fields[1])
    return found


@pytest.mark.usefixtures("in_sandbox")
def test_a_child_process_dds_sockets_live_where_only_loopback_exists() -> None:
    child = subprocess.Popen([sys.executable, "-c", _PARTICIPANT], env=dict(os.environ))
    try:
        deadline = time.monotonic() + 20.0
        sockets: list[str] = []
        while not sockets and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.2)
            sockets = _udp_sockets(child.pid)
        assert sockets, "the child never opened its DDS sockets"
        assert _interfaces(child.pid) == ["lo"], f"the child's DDS can reach: {_interfaces(child.pid)}"
    finally:
        child.kill()
        child.wait()


@pytest.mark.usefixtures("in_sandbox")
def test_only_loopback_exists_in_the_sandbox() -> None:
    interfaces = _interfaces("self")
    assert interfaces == ["lo"], f"network interfaces visible to the suite: {interfaces}"


def test_without_root_the_sandbox_pins_discovery_to_localhost(tmp_path: Path) -> None:
    """The fallback where no private namespace can be made (not root): discovery pinned to
    localhost, a domain id in 1..100, a line saying so, and the command run with its exit status.
    An `id` that answers a normal user's uid stands in for not being root."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "id").write_text("#!/bin/sh\necho 1000\n")
    (fake_bin / "id").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROS_") and k != "TT_SAM3_IN_NETNS"}
    env["PATH"] = f"{fake_bin}{os.pathsep}{env.get('PATH', '')}"
    show = "import os, sys; print(os.environ.get(sys.argv[1], '')); sys.exit(3)"
    answers = {}
    for name in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_LOCALHOST_ONLY", "ROS_DOMAIN_ID", "TT_SAM3_IN_NETNS"):
        done = subprocess.run(
            [str(SANDBOX), sys.executable, "-c", show, name],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 3, done.stderr
        assert "no private network namespace; discovery pinned to localhost" in done.stderr
        answers[name] = done.stdout.strip()
    assert answers["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert answers["ROS_LOCALHOST_ONLY"] == "1"
    assert 1 <= int(answers["ROS_DOMAIN_ID"]) <= 100
    assert answers["TT_SAM3_IN_NETNS"] == ""


def test_the_sandbox_keeps_a_domain_id_it_is_given(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TT_SAM3_IN_NETNS"}
    env["ROS_DOMAIN_ID"] = "42"
    done = subprocess.run(
        [str(SANDBOX), sys.executable, "-c", "import os; print(os.environ['ROS_DOMAIN_ID'])"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "42"


def test_each_pytest_worker_has_a_domain_of_its_own() -> None:
    """`make test` runs two pytest-xdist workers in one network namespace: were their domains the
    same, one test's /sam3 would answer another's subscriptions."""
    for run_domain in (1, 42, 99, 100):
        domains = [worker_domain_id(run_domain, f"gw{n}") for n in range(8)]
        assert len(set(domains)) == 8, domains
        assert all(1 <= domain <= 100 for domain in domains), domains
        assert worker_domain_id(run_domain, "") == run_domain


def test_workers_share_the_cores() -> None:
    assert [worker_threads(2, n) for n in (1, 2, 3)] == [2, 1, 1]
    assert worker_threads(16, 2) == 8
    assert worker_threads(1, 0) == 1
