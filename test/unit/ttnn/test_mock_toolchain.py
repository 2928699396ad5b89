"""The mock p150a's stand-in toolchain (tools/ttnn_mock/toolchain.py), on a fake wheel folder.

No ttnn needed: these check the version guard (the mock check skips, saying why, on a wheel the
stand-in was not written for) and what the stand-in compiler writes, which test_mock_device then
relies on with the real wheel.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
from ttnn_mock import toolchain
from ttnn_mock.elf import EM_RISCV, minimal_riscv_elf

SFPI_FILE = "sfpi_repo='https://example.invalid/sfpi'\nsfpi_version='{version}'\nsfpi_build='{build}'\n"


def fake_wheel(
    root: Path, sfpi: str = toolchain.SFPI_VERSION, build: str = toolchain.SFPI_BUILD, compiler: str = ""
) -> Path:
    """A folder shaped like the ttnn wheel's: sfpi-version, one pre-compiled Blackhole firmware."""
    wheel = root / "ttnn"
    (wheel / "tt_metal").mkdir(parents=True)
    (wheel / "runtime" / "hw").mkdir(parents=True)
    (wheel / "tt_metal" / "sfpi-version").write_text(SFPI_FILE.format(version=sfpi, build=build))
    firmware = wheel / "tt_metal" / "pre-compiled" / "1234" / "brisc"
    firmware.mkdir(parents=True)
    (firmware / "brisc.elf").write_bytes(minimal_riscv_elf(comment=compiler or toolchain.FIRMWARE_COMPILER))
    return wheel


def test_the_wheel_it_was_written_for_passes(tmp_path):
    wheel = fake_wheel(tmp_path)
    assert toolchain.check_wheel(wheel, version=toolchain.TTNN_VERSION) == wheel


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"version": "0.82.0"}, "ttnn 0.82.0 installed"),
        ({"sfpi": "7.90.0"}, "sfpi 7.90.0"),
        ({"build": "1051"}, "build 1051"),
        ({"compiler": "GCC: (tenstorrent/sfpi:7.90.0[1060]) 15.2.0"}, "7.90.0[1060]"),
    ],
)
def test_another_wheel_is_refused_with_the_reason(tmp_path, change, named):
    version = change.pop("version", toolchain.TTNN_VERSION)
    wheel = fake_wheel(tmp_path, **change)
    with pytest.raises(toolchain.MockUnavailableError, match=r"\S") as refused:
        toolchain.check_wheel(wheel, version=version)
    assert named in str(refused.value)


def test_descriptor_carries_the_harvest_mask():
    text = toolchain.cluster_descriptor(3)
    assert "\n    harvest_mask: 3\n" in text and "board_type: p150" in text
    assert "harvest_mask: 0" not in text.replace("dram_harvesting_mask: 0", "")


def _sections(elf: bytes) -> list[str]:
    shoff = struct.unpack_from("<I", elf, 32)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 46)
    names_at = struct.unpack_from("<I", elf, shoff + shstrndx * shentsize + 16)[0]
    names = []
    for index in range(shnum):
        name = struct.unpack_from("<I", elf, shoff + index * shentsize)[0]
        names.append(elf[names_at + name : elf.index(b"\0", names_at + name)].decode())
    return names


def test_stand_in_compiler_answers_compiles_and_links(tmp_path):
    wheel = fake_wheel(tmp_path / "site")
    env = toolchain.build(tmp_path / "scratch", 3, wheel=wheel)
    root = Path(env["TT_METAL_RUNTIME_ROOT"])
    assert (root / "tt_metal").resolve() == (wheel / "tt_metal").resolve()
    assert "harvest_mask: 3" in Path(env["TT_METAL_MOCK_CLUSTER_DESC_PATH"]).read_text()
    compiler = root / "runtime" / "sfpi" / "compiler" / "bin" / "riscv-tt-elf-g++"
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.strip() == toolchain.COMPILER_VERSION

    obj, dep = tmp_path / "k.123.o", tmp_path / "k.123.d"
    command = [compiler, "-O2", "-MMD", "-c", "-o", obj, "/src/kernel.cc", "-MF", dep]
    subprocess.run(command, check=True)
    assert obj.exists() and obj.stat().st_size == 0
    assert dep.read_text() == f"{obj}: /src/kernel.cc\n"

    elf = tmp_path / "trisc0.123.elf"
    subprocess.run([compiler, "-O3", "-nostartfiles", "-T", "k.ld", obj, "-o", elf], check=True)
    data = elf.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 1  # ELF32
    assert struct.unpack_from("<H", data, 18)[0] == EM_RISCV
    assert {".text", ".symtab", ".strtab", ".rela.text"} <= set(_sections(data))

    refused = subprocess.run([compiler, "-c", "/src/kernel.cc"], capture_output=True, text=True)
    assert refused.returncode != 0 and "no -o" in refused.stderr
