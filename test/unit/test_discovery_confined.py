"""The suite's ROS 2 traffic cannot leave this machine: `make test` is safe anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

in_sandbox = pytest.mark.skipif(
    not os.environ.get("TT_SAM3_IN_NETNS"), reason="not started through tools/ros_sandbox.sh as root"
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


@in_sandbox
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


@in_sandbox
def test_only_loopback_exists_in_the_sandbox() -> None:
    interfaces = _interfaces("self")
    assert interfaces == ["lo"], f"network interfaces visible to the suite: {interfaces}"
