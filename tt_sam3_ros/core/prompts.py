"""Prompt validation: one set of limits for the Python API, the CLI and the node.

The limits keep a frame's cost bounded (every prompt runs the fusion encoder,
decoder and mask head) and keep texts inside what CLIP's 32-token context can use.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from tt_sam3_ros.core.errors import InputError, quoted

#: Most prompts one call may carry.
MAX_PROMPTS = 16
#: Longest prompt text, in characters (CLIP truncates to 32 tokens anyway).
MAX_PROMPT_CHARS = 256


def check_max_prompts(max_prompts: object) -> int:
    """``max_prompts`` as an int in 1..MAX_PROMPTS: the most prompts an engine is sized for.

    Raises:
        InputError: naming the range and the value given.
    """
    if type(max_prompts) is not int or not 1 <= max_prompts <= MAX_PROMPTS:  # a bool is no count
        raise InputError(f"max_prompts must be an integer in 1..{MAX_PROMPTS}, got {quoted(max_prompts)}")
    return max_prompts


def validate_prompts(prompts: object, max_prompts: int = MAX_PROMPTS, exact: bool = False) -> list[str]:
    """Check prompts and return them stripped of surrounding whitespace.

    ``exact`` refuses surrounding whitespace instead of stripping it: the node publishes each
    prompt as a class name in LabelInfo, and a consumer matching the parameter's text must find
    it unchanged.

    A prompt that SAM 3 would read as another one of the list (the same text up to case and
    runs of spaces: its CLIP tokenizer lowercases and folds them) is refused: it would report
    every object twice, with two ids. NUL and every other control character are refused
    wherever they are (``str.isprintable``); surrounding whitespace is stripped or refused.

    Raises:
        InputError: naming the limit that was broken and the offending value.
    """
    if isinstance(prompts, str) or not isinstance(prompts, Sequence):
        raise InputError(f"prompts must be a list of strings, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise InputError("prompts must not be empty: give at least one text, e.g. ['car']")
    if len(prompts) > max_prompts:
        raise InputError(f"too many prompts: {len(prompts)} given, at most {max_prompts} allowed")
    cleaned: list[str] = []
    seen: dict[str, int] = {}
    for index, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise InputError(f"prompt {index} must be a string, got {type(prompt).__name__}")
        text = prompt.strip()
        if not text:
            raise InputError(f"prompt {index} is empty or only whitespace")
        if not text.isprintable():
            raise InputError(f"prompt {index} {quoted(text)} holds a control character (newline, tab)")
        if exact and text != prompt:
            raise InputError(
                f"prompt {index} {quoted(prompt)} has spaces around it; it is published as a class name "
                f"exactly as given, so write {quoted(text)}"
            )
        if len(text) > MAX_PROMPT_CHARS:
            raise InputError(
                f"prompt {index} is {len(text)} characters long; at most {MAX_PROMPT_CHARS} allowed"
            )
        key = _as_read(text)
        if key in seen:
            first = seen[key]
            raise InputError(
                f"prompt {index} {quoted(text)} repeats prompt {first} {quoted(cleaned[first])}: SAM 3 "
                "reads them alike (case and spaces aside), so every object would be reported twice; "
                "give each text once"
            )
        seen[key] = index
        cleaned.append(text)
    return cleaned


def _as_read(text: str) -> str:
    """The text as SAM 3's CLIP tokenizer normalises it: NFC, runs of whitespace as one space, lowercase."""
    return " ".join(unicodedata.normalize("NFC", text).split()).lower()
