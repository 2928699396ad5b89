"""The node's /diagnostics: one status per camera and per chip, once a second. A mixin of
``Sam3Node``; ``diagnostics.py`` builds the messages."""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray

from tt_sam3_ros.engines import CHECKED_STAGES
from tt_sam3_ros.ros.diagnostics import (
    NodeView,
    camera_status,
    chip_status,
    depth_status,
    segmentation_status,
    tracking_status,
)


class NodeStatus:
    """Sam3Node's /diagnostics side (mixed into the node)."""

    # diagnostics

    def _publish_diagnostics(self) -> None:
        """The engine's status (state, frame counts and recent timings of all cameras), ~1 Hz.

        With ``cameras``, one status per camera follows (and its depth status with depth on).
        """
        view = self._node_view()
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status.append(segmentation_status(view, self._stats.snapshot()))
        chips = self._chips
        if self._per_chip and chips is not None:
            array.status += [chip_status(view, chip.snapshot()) for chip in chips.chips]
        for camera in self._cameras.values():
            if camera.name:
                array.status.append(camera_status(view, camera.name, camera.state.stats.camera.snapshot()))
            prefix = f"{self.get_name()}: camera {camera.name}" if camera.name else self.get_name()
            if self._depth_enabled:
                array.status.append(depth_status(prefix, camera.state.depth_stats.snapshot()))
            if self._settings.tracking:
                array.status.append(tracking_status(prefix, camera.state.tracker.ageing()))
        self._diagnostics_pub.publish(array)

    def _node_view(self) -> NodeView:
        engine = self._engine_info
        return NodeView(
            name=self.get_name(),
            state=self._state,
            engine=engine.get("engine", self.get_parameter("engine").value),
            device=engine.get("device", self.get_parameter("device").value or "default"),
            dtype=engine.get("dtype", self.get_parameter("dtype").value or "default"),
            model=engine.get("model", self.get_parameter("model_id").value),
            prompts=self._settings.prompts,
            fully_qualified_name=self.get_fully_qualified_name(),
            prompt_path=engine.get("prompt_path", ""),
            input_path=engine.get("input", ""),
            devices=self._devices_view(),
            stage_checks=tuple((stage, engine[stage]) for stage in CHECKED_STAGES if stage in engine),
        )

    def _devices_view(self) -> str:
        """The chips and which serve, for /diagnostics ('' without ``devices``)."""
        chips = self._chips
        if not self._per_chip or chips is None:
            return ""
        serving = ", ".join(chip.name for chip in chips.serving) or "none"
        return f"{', '.join(chip.name for chip in chips.chips)} (serving: {serving})"
