"""Deprecated path of :mod:`tt_sam3_ros.core.errors` (docs/python_api.md's old imports)."""

from tt_sam3_ros._moved import alias

alias(__name__, "tt_sam3_ros.core.errors")
