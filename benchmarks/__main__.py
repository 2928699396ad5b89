"""`python -m benchmarks [--quick] [--only SECTION] [--device cpu|cuda] [--results DIR]`: print the tables.

SECTION: model, host, stream, tracking, exemplar, blackhole, fidelity (repeatable; default: all).
--results DIR also writes each section's tables to DIR/<section>.json with one metadata record (date,
commit, machine, command); the figures in the docs are generated from benchmarks/results/
(tools/gen_docs.py), so `--results benchmarks/results` then a rerun of the generator updates them.

The GPU check is `python3 -m benchmarks --only model --device cuda` (tools/gpu_check.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import os
import sys

#: Each section's module, in the folder of what it measures (docs/benchmarks.md, "Layout").
MODULES = {
    "model": "benchmarks.model.model_bench",
    "host": "benchmarks.node.host_bench",
    "stream": "benchmarks.node.stream_bench",
    "tracking": "benchmarks.tracking.tracking_bench",
    "exemplar": "benchmarks.model.exemplar_bench",
    "blackhole": "benchmarks.blackhole.blackhole_bench",
    "fidelity": "benchmarks.blackhole.fidelity_bench",
}
SECTIONS = tuple(MODULES)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny model, small images, few repeats (a smoke run, not a measure)",
    )
    parser.add_argument(
        "--only", choices=SECTIONS, action="append", help="run only this section (repeatable)"
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="device of the sections that take one (model): cpu (default), cuda, cuda:N",
    )
    parser.add_argument(
        "--results",
        metavar="DIR",
        help="also write each section's tables to DIR/<section>.json (benchmarks/results feeds the docs)",
    )
    args = parser.parse_args(argv)
    if args.results and args.quick:
        parser.error("--results records real runs only; --quick numbers say nothing about speed")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Nothing here may reach a model hub: the weights are random and the tokenizer is local.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from tt_sam3_ros.engines.base import EngineError
    from tt_sam3_ros.engines.torch_engine import resolve_device

    from .common import report, results

    try:
        resolve_device(args.device)
    except (EngineError, RuntimeError) as error:
        print(f"python -m benchmarks: --device {args.device}: {error}", file=sys.stderr)
        return 2
    if args.quick:
        import torch

        # A smoke run: one thread keeps it quick and steady when other work shares the cores.
        torch.set_num_threads(1)

    print(
        "tt_sam3_ros benchmarks"
        + (" --quick (tiny model: the numbers say nothing about speed)" if args.quick else "")
    )
    for line in report.machine_lines():
        print(line)
    failures: list[str] = []
    for section in args.only or SECTIONS:
        module = importlib.import_module(MODULES[section])
        takes_device = "device" in inspect.signature(module.main).parameters
        if args.device != "cpu" and not takes_device:
            print(f"\n(section {section} runs on the CPU whatever --device says)")
        report.recorded()
        # Only a recorded run copies what it prints (the raw output beside its tables).
        keep = results.transcript() if args.results else contextlib.nullcontext(io.StringIO())
        with keep as printed:
            found = module.main(args.quick, device=args.device) if takes_device else module.main(args.quick)
        failures += found or []
        if args.results:
            command = argv if argv is not None else sys.argv[1:]
            results.write(args.results, section, report.recorded(), command, printed.getvalue())
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
