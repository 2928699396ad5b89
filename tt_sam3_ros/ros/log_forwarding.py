"""The library's Python logging, forwarded to the node's ROS logger (so /rosout carries it too).

The library (segmenter, pipeline, weights, engines) logs with ``logging`` and never imports
rclpy; the node attaches this handler to the library's logger for its life.
"""

from __future__ import annotations

import logging
from typing import Any

#: The library's loggers, forwarded to the node's ROS logger.
LIBRARY_LOGGER = "tt_sam3_ros"


class _RosLogHandler(logging.Handler):
    """Forwards the library's Python log records to a ROS logger, so /rosout carries them too.

    Why: the library (segmenter, weights, engines) logs with ``logging`` and never imports rclpy;
    without this its lines ("random weights loaded", the engine choice) reach only stderr.
    """

    def __init__(self, ros_logger: Any) -> None:
        super().__init__(level=logging.INFO)
        self._ros_logger = ros_logger

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.levelno >= logging.ERROR:
                self._ros_logger.error(text)
            elif record.levelno >= logging.WARNING:
                self._ros_logger.warning(text)
            else:
                self._ros_logger.info(text)
        except Exception:
            self.handleError(record)


def forward_library_logging(ros_logger: Any) -> tuple[logging.Handler, bool, int]:
    """Attach a forwarding handler to the library's logger; returns what ``stop_forwarding`` needs."""
    library = logging.getLogger(LIBRARY_LOGGER)
    handler = _RosLogHandler(ros_logger)
    saved = (handler, library.propagate, library.level)
    library.addHandler(handler)
    library.propagate = False  # the ROS logger prints it already; no second copy on stderr
    if library.getEffectiveLevel() > logging.INFO:
        library.setLevel(logging.INFO)
    return saved


def stop_forwarding(saved: tuple[logging.Handler, bool, int]) -> None:
    handler, propagate, level = saved
    library = logging.getLogger(LIBRARY_LOGGER)
    library.removeHandler(handler)
    library.propagate = propagate
    library.setLevel(level)
