"""The Blackhole engine: the roofline and calibrated cost models of its traces, the tt-metal figures
they are calibrated on and validated against, the image path on a mock p150a, the compute settings
chosen on the emulator (fidelity), and a device run's latencies against the models (compare_device)."""
