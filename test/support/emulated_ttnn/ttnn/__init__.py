"""`import ttnn` answered by the TT-NN emulator, for a process that cannot be handed a module.

The node and the CLI import ttnn themselves (engines.ttnn_engine.load_ttnn); a test that runs
them in their own process puts this folder and test/support on PYTHONPATH, and this package
replaces itself in sys.modules with ttnn_emulator, so the engine drives the emulator exactly as
it would drive the real library. Never on the path of anything but tests.

Such a test describes the machine through the environment, which is all it can hand the process:
``TTNN_EMULATOR_CHIPS`` the chips it has (default 1), and ``TTNN_EMULATOR_LOST_CHIPS_FILE`` a file
of chip ids that stop answering: a trace replay on a chip listed there fails as a lost device
would, from the moment the test writes the id (the file is read at every replay).
"""

import os
import sys
from pathlib import Path

import ttnn_emulator

_chips = os.environ.get("TTNN_EMULATOR_CHIPS")
if _chips:
    ttnn_emulator.SETTINGS.num_devices = int(_chips)

_lost_chips_file = os.environ.get("TTNN_EMULATOR_LOST_CHIPS_FILE")
if _lost_chips_file:
    _replay = ttnn_emulator.execute_trace

    def _lost(device_id: int) -> bool:
        try:
            return str(device_id) in Path(_lost_chips_file).read_text().split()
        except FileNotFoundError:
            return False

    def execute_trace(mesh_device, trace_id, **kwargs):
        if _lost(mesh_device.device_id):
            raise ttnn_emulator.EmulatorError(
                f"chip {mesh_device.device_id} lost: the device does not answer"
            )
        return _replay(mesh_device, trace_id, **kwargs)

    ttnn_emulator.execute_trace = execute_trace

sys.modules[__name__] = ttnn_emulator
