"""Figures the documentation quotes, rendered from benchmark results (benchmarks/results/*.json).

tools/gen_docs.py fills each ``<!-- BEGIN GENERATED: name -->`` region of README.md and docs/
with ``REGIONS[name]()``, so a quoted figure has one source: the results file a benchmark wrote.
"""

from __future__ import annotations

from collections.abc import Callable

#: Generated region name -> its Markdown.
REGIONS: dict[str, Callable[[], str]] = {}
