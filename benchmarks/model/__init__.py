"""The model on the CPU or a GPU: our torch engine against transformers' documented usage (model),
the latency check per stage and prompt count (the GPU check), and what exemplar boxes cost."""
