"""Suite-wide guards: ROS 2 discovery never leaves this machine, whoever starts pytest.

`make test` already runs pytest through tools/ros_sandbox.sh; these defaults cover a
plain `pytest` call, and every child process the tests start inherits them.
"""

from __future__ import annotations

import os
import random

os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOCALHOST_ONLY"] = "1"
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))
# Nothing in the suite may reach a model hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
