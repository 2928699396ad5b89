"""Open a MOCK Blackhole p150a with the real ttnn 0.81.1 library and no card (docs/design/facts.md, Mock
p150a).

Standard library only: it runs inside .venv-ttnn (CPython 3.12, the ttnn wheel) before ttnn
is imported, and the 3.11 tests import it to check the wheel without importing ttnn.

What the mock needs, and what this module builds in a scratch folder:
- a cluster descriptor for one p150 (``TT_METAL_MOCK_CLUSTER_DESC_PATH``), with a chosen
  Tensix harvest mask (0: 13x10 compute grid; 3: two columns off, 11x10, 120 cores like a
  real p150a);
- a runtime root (``TT_METAL_RUNTIME_ROOT``) that is the wheel's own folder, linked entry by
  entry, plus ``runtime/sfpi/compiler/bin/riscv-tt-elf-g++``: the SFPI RISC-V compiler that no
  package ships. Its stand-in answers ``--version`` with the compiler string of the wheel's
  pre-compiled firmware (so the build key selects that firmware and nothing is built), writes
  an empty object and the ``-MF`` dependency file on compile, and a minimal valid ELF32 RISC-V
  executable on link. No kernel is really compiled, nothing computes: the mock checks what
  the host side of the library checks (validation, program factories, circular buffers, the
  allocator);
- a private kernel cache (``TT_METAL_CACHE``), so no run sees another's stand-in objects.

The stand-in is written for exactly one wheel: ``check_wheel`` compares the installed ttnn
version, its sfpi-version file and its firmware's compiler string with the facts below and
says why the mock cannot be used when any differs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import struct
from pathlib import Path

from ttnn_conformance import MOCK_P150  # tools/ is on sys.path: the one p150 descriptor kept

from .elf import minimal_riscv_elf

#: The wheel this stand-in was written for, and the facts read from it (docs/design/facts.md, Mock p150a).
TTNN_VERSION = "0.81.1"
SFPI_VERSION = "7.89.0"
SFPI_BUILD = "1050"
#: The .comment string of the wheel's pre-compiled firmware; the stand-in's --version prints it
#: without the "GCC: " prefix, as the real compiler does.
FIRMWARE_COMPILER = "GCC: (tenstorrent/sfpi:7.89.0[1050]) 15.1.0"
COMPILER_VERSION = "riscv-tt-elf-g++ (tenstorrent/sfpi:7.89.0[1050]) 15.1.0"
#: Tensix harvest masks: 0 leaves the 13x10 grid of worker dispatch; 3 turns two columns off
#: (11x10 compute, 120 cores, like a real p150a).
HARVEST_MASKS = {"unharvested": 0, "harvested": 3}

STAND_IN = """#!/bin/sh
# Stand-in for the SFPI RISC-V compiler (tools/ttnn_mock/toolchain.py): nothing is compiled.
if [ "$1" = "--version" ]; then echo '{version}'; exit 0; fi
out=""; dep=""; src=""; compile=0; prev=""
for arg in "$@"; do
  case "$prev" in -o) out="$arg" ;; -MF) dep="$arg" ;; esac
  case "$arg" in -c) compile=1 ;; *.cc|*.cpp|*.c|*.h) src="$arg" ;; esac
  prev="$arg"
done
[ -n "$out" ] || {{ echo "riscv-tt-elf-g++ stand-in: no -o in: $*" >&2; exit 1; }}
case "$out" in
  *.o|*.gch) : > "$out"; [ -z "$dep" ] || printf '%s: %s\\n' "$out" "$src" > "$dep" ;;
  *) [ "$compile" = 1 ] && {{ : > "$out"; exit 0; }}; cp '{elf}' "$out" ;;
esac
"""


class MockUnavailableError(RuntimeError):
    """The mock device cannot be opened here; the message says why (tests skip with it)."""


def wheel_dir() -> Path:
    """The installed ttnn package folder, found without importing ttnn."""
    spec = importlib.util.find_spec("ttnn")
    if spec is None or not spec.submodule_search_locations:
        raise MockUnavailableError("ttnn is not installed in this interpreter")
    return Path(next(iter(spec.submodule_search_locations)))


def elf_comment(path: Path) -> str:
    """The .comment section of an ELF32 file (the compiler that built it), '' when absent."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 1:
        return ""
    (shoff,) = struct.unpack_from("<I", data, 32)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 46)

    def section(index: int) -> tuple[int, int, int]:
        name, _, _, _, offset, size = struct.unpack_from("<6I", data, shoff + index * shentsize)
        return name, offset, size

    _, names_at, _ = section(shstrndx)
    for index in range(shnum):
        name, offset, size = section(index)
        if data[names_at + name : data.index(b"\0", names_at + name)] == b".comment":
            return data[offset : offset + size].split(b"\0")[0].decode(errors="replace")
    return ""


def check_wheel(root: Path | None = None, version: str | None = None) -> Path:
    """The wheel's folder when it is the one this stand-in was written for; else MockUnavailableError.

    `root` and `version` default to the installed ttnn's folder and version.
    """
    root = root or wheel_dir()
    version = version or importlib.metadata.version("ttnn")
    if version != TTNN_VERSION:
        raise MockUnavailableError(
            f"ttnn {version} installed; the mock toolchain is written for {TTNN_VERSION}"
        )
    sfpi_file = root / "tt_metal" / "sfpi-version"
    text = sfpi_file.read_text() if sfpi_file.exists() else ""
    found = dict(re.findall(r"^(sfpi_version|sfpi_build)='([^']*)'", text, re.M))
    if (found.get("sfpi_version"), found.get("sfpi_build")) != (SFPI_VERSION, SFPI_BUILD):
        raise MockUnavailableError(
            f"the wheel asks for sfpi {found.get('sfpi_version')} build {found.get('sfpi_build')}; "
            f"the stand-in compiler impersonates {SFPI_VERSION} build {SFPI_BUILD}"
        )
    firmware = sorted((root / "tt_metal" / "pre-compiled").glob("*/brisc/brisc.elf"))
    comments = {elf_comment(path) for path in firmware}
    if FIRMWARE_COMPILER not in comments:
        raise MockUnavailableError(
            f"no pre-compiled firmware built by {FIRMWARE_COMPILER!r} in the wheel (found "
            f"{sorted(comments)}): the stand-in's version would not select a bundled firmware"
        )
    return root


def cluster_descriptor(harvest_mask: int, boards: int = 1) -> str:
    """A p150 descriptor with `harvest_mask` as its Tensix harvesting; with `boards` > 1, that many
    p150 boards side by side, each chip on its own PCIe link and no Ethernet link between them."""
    text, count = re.subn(r"(\n    harvest_mask: )\d+", rf"\g<1>{harvest_mask}", MOCK_P150)
    if count != 1:
        raise MockUnavailableError(
            "the p150 descriptor in tools/ttnn_conformance.py has no single harvest_mask"
        )
    if boards == 1:
        return text
    found = re.search(r"chip_unique_ids:\n  0: (\d+)\n", text)
    harvesting = re.search(r"harvesting:\n  0:\n((?:    .*\n)+)", text)
    if boards < 1 or found is None or harvesting is None:
        raise MockUnavailableError(f"cannot describe {boards} boards from the p150 descriptor")
    first = int(found.group(1))
    chips = range(boards)
    return (
        "arch:\n"
        + "".join(f"  {i}: blackhole\n" for i in chips)
        + "chips:\n  {}\nchip_unique_ids:\n"
        + "".join(f"  {i}: {first + i}\n" for i in chips)
        + "ethernet_connections:\n  []\nethernet_connections_to_remote_devices:\n  []\nchips_with_mmio:\n"
        + "".join(f"  - {i}: {i}\n" for i in chips)
        + "harvesting:\n"
        + "".join(f"  {i}:\n{harvesting.group(1)}" for i in chips)
        + "boards:\n"
        + "".join(
            f"  -\n    - board_id: {first + i}\n    - board_type: p150\n    - chips:\n        - {i}\n"
            for i in chips
        )
    )


def build(scratch: Path, harvest_mask: int, wheel: Path | None = None, boards: int = 1) -> dict[str, str]:
    """Lay out the mock in `scratch`; returns the environment variables that select it.

    `wheel`: the ttnn package folder to link (default: the installed one, checked first).
    `boards`: how many unlinked p150 boards the descriptor holds (cluster_descriptor).
    """
    wheel = wheel or check_wheel()
    root = scratch / "runtime-root"
    (root / "runtime").mkdir(parents=True, exist_ok=True)
    for entry in wheel.iterdir():
        if entry.name not in ("runtime", "__pycache__") and not (root / entry.name).exists():
            (root / entry.name).symlink_to(entry)
    for entry in (wheel / "runtime").iterdir():
        if not (root / "runtime" / entry.name).exists():
            (root / "runtime" / entry.name).symlink_to(entry)
    bin_dir = root / "runtime" / "sfpi" / "compiler" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    elf = bin_dir / "stand-in-kernel.elf"
    elf.write_bytes(minimal_riscv_elf())
    compiler = bin_dir / "riscv-tt-elf-g++"
    compiler.write_text(STAND_IN.format(version=COMPILER_VERSION, elf=elf))
    compiler.chmod(0o755)
    descriptor = scratch / f"p150_harvest_{harvest_mask}_boards_{boards}.yaml"
    descriptor.write_text(cluster_descriptor(harvest_mask, boards))
    return {
        "TT_METAL_RUNTIME_ROOT": str(root),
        "TT_METAL_MOCK_CLUSTER_DESC_PATH": str(descriptor),
        "TT_METAL_CACHE": str(scratch / "cache"),
        "TT_METAL_LOGGER_LEVEL": os.environ.get("TT_METAL_LOGGER_LEVEL", "FATAL"),
        "LOGURU_LEVEL": os.environ.get("LOGURU_LEVEL", "WARNING"),
    }
