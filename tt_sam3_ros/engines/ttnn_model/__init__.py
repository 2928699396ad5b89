"""SAM 3's image path (ViT trunk and FPN neck) written in TT-NN ops, for a Blackhole p150a.

Modules, each named after the transformers module it ports:
    config.py   shapes and device choices computed once from the Hugging Face config.
    weights.py  host-side weight preparation (pure torch) and the one-time upload.
    vit.py      Sam3ViTModel: patch embedding, position terms, 32 Sam3ViTLayer blocks.
    neck.py     Sam3VisionNeck: the four Sam3FPNLayer scales.
    trace.py    the whole image path as one metal trace: persistent input, capture, replay.

Every function takes the ttnn module as its ``ttnn`` argument, never importing it: the engine
passes the real one on a Blackhole host and tests pass the emulator (test/support), and the
conformance check (tools/ttnn_conformance.py) finds every call by that name.
"""
