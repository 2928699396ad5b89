"""The node's callbacks running on the executor, counted so the exit path can wait for them.

A callback still running when the executor shuts down fails on the executor's destroyed guard
condition ("cannot use Destroyable because destruction was requested"). rclpy 9's
``Executor.shutdown`` does not wait for them (its wait is skipped once shutdown is flagged), and
no executor says publicly which callbacks run. The node counts its own instead: every callback
it hands rclpy (subscriptions, timers, every service, the lifecycle ones included) is wrapped.
A mixin of ``Sam3Node``.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any


class CallbackCounter:
    """How many of one node's callbacks are running now; waits until none is."""

    def __init__(self) -> None:
        self._running = 0
        self._idle = threading.Condition()

    def track(self, callback: Callable[..., Any]) -> Callable[..., Any]:
        """``callback``, counted while it runs (an already counted one is returned as it is).

        A coroutine function is returned as it is too: the node has none, and counting its
        coroutine's creation would count nothing."""
        if inspect.iscoroutinefunction(callback):
            return callback

        if getattr(callback, "counted_by", None) is self:
            return callback

        @functools.wraps(callback)
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._idle:
                self._running += 1
            try:
                return callback(*args, **kwargs)
            finally:
                with self._idle:
                    self._running -= 1
                    self._idle.notify_all()

        counted.counted_by = self  # type: ignore[attr-defined]
        return counted

    @property
    def running(self) -> int:
        with self._idle:
            return self._running

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for every counted callback to return; True when none runs."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._running:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True


class CallbacksInFlight:
    """Sam3Node's callback counting (mixed into the node: ``self`` is the LifecycleNode).

    ``_callback_counter`` must exist before rclpy's ``Node.__init__`` runs: the parameter services are
    created there, through ``create_service``.
    """

    _callback_counter: CallbackCounter

    def create_subscription(self, msg_type: Any, topic: str, callback: Callable[..., Any], *args, **kwargs):
        counted = self._callback_counter.track(callback)
        return super().create_subscription(msg_type, topic, counted, *args, **kwargs)

    def create_timer(self, timer_period_sec: float, callback: Callable[..., Any], *args, **kwargs):
        return super().create_timer(timer_period_sec, self._callback_counter.track(callback), *args, **kwargs)

    def _count_service_callbacks(self) -> None:
        """Count the services rclpy created without ``create_service`` (the lifecycle ones)."""
        for service in self.services:
            service.callback = self._callback_counter.track(service.callback)

    def create_service(self, srv_type: Any, srv_name: str, callback: Callable[..., Any], *args, **kwargs):
        counted = self._callback_counter.track(callback)
        return super().create_service(srv_type, srv_name, counted, *args, **kwargs)

    def wait_for_callbacks(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for this node's callbacks still running; True when none is."""
        return self._callback_counter.wait_idle(timeout_s)

    @property
    def callbacks_running(self) -> int:
        """How many of this node's callbacks are running now."""
        return self._callback_counter.running
