"""The errors of weight loading: each one's message says what the user can do about it."""

from __future__ import annotations

from pathlib import Path


class WeightsError(RuntimeError):
    """The weights cannot be found, fetched or read; the message says what to do about it."""


class HubUnreachableError(WeightsError):
    """The weights are not cached and the hub cannot be reached (offline, or no network)."""


def corrupt(path: Path, detail: str) -> WeightsError:
    """One wording for every damaged file: what is wrong and how to get a good copy."""
    return WeightsError(
        f"{path} is corrupt or truncated: {detail}. Delete it and download it again (an interrupted "
        "download is the usual cause), or point weights_dir at an intact copy."
    )
