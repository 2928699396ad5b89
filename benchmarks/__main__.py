"""`python -m benchmarks [--quick] [--only model|host|stream]`: print the speed tables."""

from __future__ import annotations

import argparse
import os
import sys

SECTIONS = ("model", "host", "stream")


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
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Nothing here may reach a model hub: the weights are random and the tokenizer is local.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from . import report

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
    for section in args.only or SECTIONS:
        module = __import__(f"benchmarks.{section}_bench", fromlist=["main"])
        module.main(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
