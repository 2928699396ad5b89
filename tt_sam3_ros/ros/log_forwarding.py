"""The library's Python logging, forwarded to a node's ROS logger (so /rosout carries it too).

The library (segmenter, pipeline, weights, engines) logs with ``logging`` and never imports
rclpy; each node registers its ROS logger for its life. One handler serves the process, so a
line is printed once however many nodes run in it: it goes to the oldest node still registered
(the library's loggers are the process's, and a record does not say which node's work it is).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

#: The library's loggers, forwarded to the node's ROS logger.
LIBRARY_LOGGER = "tt_sam3_ros"


@dataclasses.dataclass(eq=False)
class Registration:
    """One node's ROS logger among those the library's lines may go to."""

    ros_logger: Any


class _RosLogHandler(logging.Handler):
    """Forwards the library's Python log records to one ROS logger, so /rosout carries them too.

    Why: the library (segmenter, weights, engines) logs with ``logging`` and never imports rclpy;
    without this its lines ("random weights loaded", the engine choice) reach only stderr.
    """

    def __init__(self, propagate: bool, level: int) -> None:
        super().__init__(level=logging.INFO)
        self.registrations: list[Registration] = []
        # The library logger's own settings, restored when the last node leaves.
        self.saved = (propagate, level)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            registrations = list(self.registrations)
            if not registrations:
                return
            ros_logger, text = registrations[0].ros_logger, record.getMessage()
            if record.levelno >= logging.ERROR:
                ros_logger.error(text)
            elif record.levelno >= logging.WARNING:
                ros_logger.warning(text)
            else:
                ros_logger.info(text)
        except Exception:
            self.handleError(record)


_lock = threading.Lock()
_handler: _RosLogHandler | None = None


def forward_library_logging(ros_logger: Any) -> Registration:
    """Forward the library's logging to ``ros_logger`` (while no older registration is live)
    until ``stop_forwarding``; the first registration attaches the process's one handler."""
    global _handler
    library = logging.getLogger(LIBRARY_LOGGER)
    registration = Registration(ros_logger)
    with _lock:
        if _handler is None:
            _handler = _RosLogHandler(library.propagate, library.level)
            library.addHandler(_handler)
            library.propagate = False  # the ROS logger prints it already; no second copy on stderr
            if library.getEffectiveLevel() > logging.INFO:
                library.setLevel(logging.INFO)
        _handler.registrations.append(registration)
    return registration


def stop_forwarding(registration: Registration) -> None:
    """Stop forwarding to ``registration``'s logger; the last one out detaches the handler and
    gives the library logger back its settings. Idempotent."""
    global _handler
    library = logging.getLogger(LIBRARY_LOGGER)
    with _lock:
        if _handler is None or registration not in _handler.registrations:
            return
        _handler.registrations.remove(registration)
        if not _handler.registrations:
            library.removeHandler(_handler)
            library.propagate, level = _handler.saved
            library.setLevel(level)
            _handler = None
