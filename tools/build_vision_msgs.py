"""Build the project's private vision_msgs into the running virtual environment.

Used only where ROS 2 comes from PyPI wheels: no vision_msgs wheel exists, so the
message definitions under interfaces/vision_msgs are generated with the wheels'
own rosidl generators and ament_cmake, and installed into the venv prefix, where
rclpy finds them with no run-time environment variables.

Run it with the venv's interpreter: ``.venv/bin/python tools/build_vision_msgs.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "interfaces" / "vision_msgs"

# The wheels were built in a manylinux container; their exported CMake files name
# that container's Python headers and numpy headers, which do not exist here.
_FOREIGN_PYTHON_INCLUDE = re.compile(r"/opt/python/[^;\"\s]*/include/python3\.\d+")
_FOREIGN_NUMPY_INCLUDE = re.compile(r"/opt/python/[^;\"\s]*/site-packages/numpy/_core/include")


def fix_exported_cmake_paths(prefix: Path) -> int:
    """Point the wheels' CMake exports at this interpreter's headers; returns files changed."""
    import numpy

    python_include = sysconfig.get_paths()["include"]
    numpy_include = numpy.get_include()
    changed = 0
    for cmake_file in (prefix / "share").glob("*/cmake/*.cmake"):
        text = cmake_file.read_text()
        fixed = _FOREIGN_PYTHON_INCLUDE.sub(python_include, text)
        fixed = _FOREIGN_NUMPY_INCLUDE.sub(numpy_include, fixed)
        if fixed != text:
            cmake_file.write_text(fixed)
            changed += 1
    return changed


def build(prefix: Path, build_dir: Path, jobs: int) -> None:
    """Configure, build and install vision_msgs into ``prefix``."""
    if shutil.which("cmake") is None:
        raise SystemExit("build_vision_msgs: cmake is required (apt-get install cmake)")
    env = dict(os.environ)
    # A sourced ROS 2 keeps its own prefixes; the venv's come first either way.
    for var in ("AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH"):
        env[var] = os.pathsep.join(p for p in (str(prefix), env.get(var, "")) if p)
    if build_dir.exists():
        shutil.rmtree(build_dir)
    configure = [
        "cmake",
        "-S",
        str(SOURCE),
        "-B",
        str(build_dir),
        f"-DCMAKE_INSTALL_PREFIX={prefix}",
        f"-DPython3_EXECUTABLE={sys.executable}",
        "-DBUILD_TESTING=OFF",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    subprocess.run(configure, check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(
        ["cmake", "--build", str(build_dir), "-j", str(jobs)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(["cmake", "--install", str(build_dir)], check=True, env=env, stdout=subprocess.DEVNULL)


def verify() -> None:
    """Import the generated module in a fresh interpreter, as the node will."""
    probe = (
        "from vision_msgs.msg import Detection2DArray, Detection3DArray; "
        "Detection2DArray(); Detection3DArray()"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=Path, default=REPO / "build" / "vision_msgs")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    prefix = Path(sys.prefix)
    if prefix == Path(sys.base_prefix):
        raise SystemExit("build_vision_msgs: run this with a virtual environment's python")
    fix_exported_cmake_paths(prefix)
    build(prefix, args.build_dir, args.jobs)
    verify()
    print(f"build_vision_msgs: vision_msgs installed into {prefix}")


if __name__ == "__main__":
    main()
