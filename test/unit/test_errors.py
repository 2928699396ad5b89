"""Untrusted text quoted for logs and /diagnostics: one line, bounded, readable."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tt_sam3_ros.core.errors import UNTRUSTED_TEXT_LIMIT, InputError, quoted


def test_forged_log_line_stays_on_one_line() -> None:
    text = quoted("cam\n[FATAL] [sam3]: engine lost\x1b[2J")
    assert "\n" not in text and "\x1b" not in text
    assert text == "'cam\\n[FATAL] [sam3]: engine lost\\x1b[2J'"


def test_long_text_is_cut_and_says_its_length() -> None:
    text = quoted("x" * 100_000)
    assert len(text) < UNTRUSTED_TEXT_LIMIT + 40
    assert text.endswith("... (100000 characters)")


def test_readable_text_is_kept() -> None:
    assert quoted("café") == "'café'"


@given(st.text(max_size=5000))
def test_any_text_quotes_to_one_bounded_printable_line(text: str) -> None:
    result = quoted(text)
    assert result.isprintable()
    # Each kept character escapes to at most 10 characters (\U0010ffff); the suffix is short.
    assert len(result) <= 10 * UNTRUSTED_TEXT_LIMIT + 40


def test_input_error_is_a_value_error() -> None:
    assert issubclass(InputError, ValueError)
