"""Old module paths of the public API, kept for one release after the package took its layout."""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Make ``old`` the module ``new`` itself, with a DeprecationWarning that names the new path.

    The old name becomes the same module object (not a copy of its names), so a class imported
    either way is one class and a test's monkeypatch on either path is seen by both.
    """
    warnings.warn(
        f"{old} moved to {new}; import from there or from tt_sam3_ros (the old path goes in 0.3)",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)
