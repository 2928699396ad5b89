"""Side-by-side speed measurements: `make bench` (or `python -m benchmarks`).

Three sections, each printing the machine it ran on:

- ``model``:  our torch engine vs transformers' documented SAM 3 usage, with output agreement;
- ``host``:   everything our code does per frame besides the model, vs a naive full upsample;
- ``stream``: the node fed at 30 Hz by a model slower than the frame period: output age, drops.

``--quick`` runs every section on the tiny random model and small images: a smoke run for
``make test``, whose numbers say nothing about speed.
"""
