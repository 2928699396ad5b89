"""The suite's ROS 2 traffic cannot leave this machine (issue: `make test` is safe anywhere)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def test_discovery_is_pinned_to_localhost_with_a_private_domain() -> None:
    assert os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert os.environ["ROS_LOCALHOST_ONLY"] == "1"
    assert 1 <= int(os.environ["ROS_DOMAIN_ID"]) <= 100


@pytest.mark.skipif(
    not os.environ.get("TT_SAM3_IN_NETNS"), reason="not started through tools/ros_sandbox.sh as root"
)
def test_only_loopback_exists_in_the_sandbox() -> None:
    # /proc/net/dev lists the interfaces of this process's network namespace.
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    interfaces = sorted(line.split(":")[0].strip() for line in lines)
    assert interfaces == ["lo"], f"network interfaces visible to the suite: {interfaces}"
