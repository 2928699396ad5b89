"""Side-by-side speed measurements: `make bench` (or `python -m benchmarks`).

Each section prints the machine it ran on; its module lives in the folder of what it measures
(docs/benchmarks.md, "Layout"):

- ``model/``:     the model on the CPU or a GPU (sections ``model``, ``exemplar``);
- ``node/``:      the node and its streams (``host``, ``stream``);
- ``blackhole/``: the Blackhole cost models and their calibration (``blackhole``, ``fidelity``);
- ``tracking/``:  identities against ground truth and the trackers' cost (``tracking``);
- ``common/``:    what they share: printing, results, the docs' figures, scenes, engine stand-ins.

``--quick`` runs every section on the tiny random model and small images: a smoke run for
``make test``, whose numbers say nothing about speed.
"""
