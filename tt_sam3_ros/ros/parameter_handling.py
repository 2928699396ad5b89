"""The node's parameter callbacks: startup checks, type coercion, the refusal of an unusable set,
and applying a change; on Humble (no pre/post set callbacks) the same outcome from
``set_parameters_atomically``. A mixin of ``Sam3Node``: the node holds the state."""

from __future__ import annotations

import dataclasses
from typing import Any

import rclpy
import rclpy.exceptions
import rclpy.logging
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode
from rclpy.parameter import Parameter

from tt_sam3_ros.core.errors import quoted
from tt_sam3_ros.core.settings import (
    RunSettings,
    invalid_values,
    settings_from,
)
from tt_sam3_ros.ros.parameters import (
    PARAMETERS,
    READ_AT_ACTIVATE,
    READ_AT_CONFIGURE,
    coerced,
    wrong_type,
)
from tt_sam3_ros.runtime.pipeline import (
    LOG_THROTTLE_S,
)


def _has_parameter_hooks() -> bool:
    """Whether rclpy runs callbacks before and after a parameter set: Iron and later; not Humble.

    Asked per node, not at import, so a test can hide them and run the Humble path on any rclpy.
    """
    return hasattr(LifecycleNode, "add_pre_set_parameters_callback") and hasattr(
        LifecycleNode, "add_post_set_parameters_callback"
    )


class ParameterHandling:
    """Sam3Node's parameter side (mixed into the node: ``self`` is the LifecycleNode)."""

    # parameters

    @property
    def autostart(self) -> bool:
        """Whether ``main`` should configure and activate the node by itself."""
        return bool(self.get_parameter("autostart").value)

    def _parameter_values(self) -> dict[str, Any]:
        """Every parameter's current value; None for one declared without a value (prompts)."""
        values = {}
        for name in PARAMETERS:
            try:
                values[name] = self.get_parameter(name).value
            except rclpy.exceptions.ParameterUninitializedException:
                values[name] = None
        return values

    def _check_startup_parameters(self) -> None:
        """Validate values given with -p / --params-file, which bypass the set callbacks.

        Raises:
            ValueError: naming the parameter, what is wrong with it and an example.
        """
        for name in PARAMETERS:
            parameter = self.get_parameter(name)
            if name in ("prompts", "cameras", "devices") and parameter.type_ == Parameter.Type.NOT_SET:
                continue  # unset: the node waits for prompts; one camera on image; one device
            reason = wrong_type(name, parameter.type_, parameter.value)
            if reason:
                raise ValueError(reason)
            if coerced(parameter) is not parameter:
                # An integer given for a double escaped the descriptor's range at declare (rclpy
                # checks a double range on doubles only); as a double it is checked here.
                (result,) = self.set_parameters([coerced(parameter)])
                if not result.successful:
                    raise ValueError(result.reason)
        values = self._parameter_values()
        reason = invalid_values(values)
        if reason:
            raise ValueError(reason)
        self._settings = self._with_class_ids(settings_from(values))

    @staticmethod
    def _coerce_parameters(parameters: list[Parameter]) -> list[Parameter]:
        """Before rclpy's checks: an integer given for a double is that double (threshold 0)."""
        return [coerced(parameter) for parameter in parameters]

    def _register_parameter_callbacks(self) -> None:
        """Coerce, validate and apply every later change (values given at start were checked above).

        The validating callback must refuse with a reason before anything changes, so applying
        waits until rclpy has stored the values. Iron's rclpy added callbacks that run before and
        after a set; Humble's has only the validating one, so there ``set_parameters_atomically``
        coerces before rclpy's checks and applies after rclpy's store itself: the same order, on
        the same thread, before the caller (a parameter service) has its answer.
        """
        if _has_parameter_hooks():
            self.add_pre_set_parameters_callback(self._coerce_parameters)
            self.add_on_set_parameters_callback(self._validate_parameter_change)
            self.add_post_set_parameters_callback(self._apply_parameter_change)
            return
        self._parameter_hooks_emulated = True
        self.add_on_set_parameters_callback(self._validate_parameter_change)

    def set_parameters(self, parameter_list: list[Parameter]) -> list[SetParametersResult]:
        """rclpy's; on Humble one parameter at a time through ``set_parameters_atomically``, as
        rclpy itself sets them, so each is coerced and applied as on Iron and later."""
        if not self._parameter_hooks_emulated:
            return super().set_parameters(parameter_list)
        return [self.set_parameters_atomically([parameter]) for parameter in parameter_list]

    def set_parameters_atomically(self, parameter_list: list[Parameter]) -> SetParametersResult:
        """rclpy's; on Humble coerced first, so the descriptors' ranges judge the double an integer
        means and the double is what is stored, and applied once rclpy has stored the values.

        Humble's parameter services call this for ``ros2 param set`` and ``ros2 param load``.
        """
        if not self._parameter_hooks_emulated:
            return super().set_parameters_atomically(parameter_list)
        parameters = self._coerce_parameters(parameter_list)
        result = super().set_parameters_atomically(parameters)
        if result.successful:
            self._apply_parameter_change(parameters)
        return result

    def _with_class_ids(self, settings: RunSettings) -> RunSettings:
        """``settings`` with the class ids of its prompts (new prompts get the next ids)."""
        return dataclasses.replace(settings, class_ids=self._class_ids.assign(settings.prompts))

    def _validate_parameter_change(self, parameters: list[Parameter]) -> SetParametersResult:
        """Accept or refuse a set-parameters request as a whole, with the reason.

        Runs before anything changes; ranges were already checked by rclpy against the
        descriptors, types are checked here (the parameters are dynamically typed).
        Applying happens in ``_apply_parameter_change``.
        """
        values = self._parameter_values()
        for parameter in parameters:
            refusal = wrong_type(parameter.name, parameter.type_, parameter.value) or self._refuse_now(
                parameter.name
            )
            if refusal:
                return self._refused(refusal)
            values[parameter.name] = parameter.value
        reason = invalid_values(values, prompts_required=any(p.name == "prompts" for p in parameters))
        return self._refused(reason) if reason else SetParametersResult(successful=True)

    def _refused(self, reason: str) -> SetParametersResult:
        """A refusal with its reason, also logged (at most once per 5 s): whoever watches the
        robot's log sees why a change another tool asked for did not happen."""
        self.get_logger().warning(f"parameter change refused: {reason}", throttle_duration_sec=LOG_THROTTLE_S)
        return SetParametersResult(successful=False, reason=reason)

    def _refuse_now(self, name: str) -> str:
        """Why ``name`` cannot change in the current lifecycle state ('' when it can)."""
        if name in READ_AT_CONFIGURE and self._state != "unconfigured":
            return (
                f"{name} is read at configure and the node is {self._state}: "
                "deactivate and clean it up, set it, then configure again"
            )
        if name in READ_AT_ACTIVATE and self._state == "active":
            return f"{name} is read at activate: deactivate the node, set it, then activate again"
        return ""

    def _apply_parameter_change(self, parameters: list[Parameter]) -> None:
        """Publish the new settings to the worker (next frame) and re-latch LabelInfo."""
        values = self._parameter_values()
        self._settings = self._with_class_ids(settings_from(values))
        changed = {parameter.name for parameter in parameters}
        if changed & {"prompts", "threshold"}:
            self.publish_label_info()
        if "prompts" in changed:
            self.get_logger().info(f"prompts now [{', '.join(quoted(p) for p in self._settings.prompts)}]")
