#!/usr/bin/env bash
# Run a command with ROS 2 discovery kept on this machine: the test runner's guard.
#
# Discovery is pinned to localhost and a random domain id keeps concurrent runs
# apart; as root, the command also runs in a private network namespace that holds
# only loopback, so no DDS packet can leave the machine whatever the middleware
# does. Everything `make test` starts goes through here.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: tools/ros_sandbox.sh COMMAND [ARG...]" >&2; exit 2; }
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_LOCALHOST_ONLY=1  # read by Jazzy; Kilted uses the range above
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$((RANDOM % 100 + 1))}"
if [ "$(id -u)" = 0 ] && [ -z "${TT_SAM3_IN_NETNS:-}" ] && unshare --net true 2>/dev/null; then
  export TT_SAM3_IN_NETNS=1
  exec unshare --net bash -c 'ip link set lo up && exec "$@"' ros_sandbox "$@"
fi
[ -n "${TT_SAM3_IN_NETNS:-}" ] || echo "ros_sandbox: no private network namespace; discovery pinned to localhost" >&2
exec "$@"
