"""The real ttnn library on a mock Blackhole p150a, off-chip (docs/design/facts.md, Mock p150a).

toolchain.py  the mock's scratch folder: cluster descriptor, runtime root, stand-in compiler.
elf.py        the minimal ELF32 RISC-V executable the stand-in linker writes.
oplog.py      records the engine's ttnn calls (op, shapes, dtypes, fidelity, stage).
image_path.py runs the engine's image path on the mock (CPython 3.12, .venv-ttnn).
common.py     what the manifest-driven runners (prompt_layers.py, fallback_forms.py) share.

Import with tools/ on sys.path (``import ttnn_mock``), as the tests and benchmarks do.
"""
