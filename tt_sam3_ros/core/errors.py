"""Errors a user reads: the bad-input exception type, and untrusted text made safe to quote.

Why a type of our own: the node skips a frame it cannot use and counts it as bad input, but an
engine fault must be logged as an engine fault with its traceback. ``ValueError`` cannot tell the
two apart (torch, transformers and ttnn raise it too), so only the code that checks what a user
sends (messages, images, depth, prompts, parameters, CLI arguments, videos) raises ``InputError``;
the engines never do. It subclasses ``ValueError`` so callers
of the Python API that catch ``ValueError`` keep working.
"""

from __future__ import annotations

# Enough for a frame_id, an encoding or a prompt to be recognisable in a log line, small enough
# that a hostile message cannot make every /diagnostics status huge.
UNTRUSTED_TEXT_LIMIT = 64


class InputError(ValueError):
    """Input from outside (a message, a file, a parameter) that cannot be used, with the reason."""


class StartCancelledError(Exception):
    """A start (weights, engine, warm-up) given up between two of its phases: the process is
    stopping. Each phase may take minutes on a first run (a download, an upload to the chip,
    kernel compiles); a stop waits for the phase in flight, never for the ones after it."""


def quoted(text: object, limit: int = UNTRUSTED_TEXT_LIMIT) -> str:
    """``text`` as a single-line quoted literal of at most about ``limit`` characters.

    Control characters (newlines, terminal escapes) are escaped, so a message cannot forge log
    lines or drive a terminal; longer text is cut and says how long it was.
    """
    value = text if isinstance(text, str) else str(text)
    cut = value[:limit]
    escaped = "".join(_escape(char) for char in cut)
    suffix = f"... ({len(value)} characters)" if len(value) > limit else ""
    return f"'{escaped}'{suffix}"


def printable(text: object, limit: int = UNTRUSTED_TEXT_LIMIT) -> str:
    """``text`` on one line and at most about ``limit`` characters, without quotes around it.

    For a message that may embed untrusted text (an exception's message): control characters
    are escaped and longer text is cut, saying how long it was, as ``quoted`` does.
    """
    value = text if isinstance(text, str) else str(text)
    escaped = "".join(char if char.isprintable() else _escape(char) for char in value[:limit])
    return escaped + (f"... ({len(value)} characters)" if len(value) > limit else "")


def _escape(char: str) -> str:
    """A printable character as itself; anything else (newline, ESC, bidi controls) as an escape."""
    if char in "'\\":
        return "\\" + char
    if char.isprintable():
        return char
    return char.encode("unicode_escape").decode("ascii")
