"""`import ttnn` answered by the TT-NN emulator, for a process that cannot be handed a module.

The node and the CLI import ttnn themselves (engines.ttnn_engine.load_ttnn); a test that runs
them in their own process puts this folder and test/support on PYTHONPATH, and this package
replaces itself in sys.modules with ttnn_emulator, so the engine drives the emulator exactly as
it would drive the real library. Never on the path of anything but tests.
"""

import sys

import ttnn_emulator

sys.modules[__name__] = ttnn_emulator
