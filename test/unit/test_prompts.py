"""Prompt checks as a user meets them: every bad list refused with the reason, good ones kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.prompts import validate_prompts


@pytest.mark.parametrize(
    ("prompts", "reason"),
    [
        (["car", "car"], "prompt 1 'car' repeats prompt 0 'car'"),
        (["car", "person", "Car"], "prompt 2 'Car' repeats prompt 0 'car'"),
        (["red car", "red  car"], "prompt 1 'red  car' repeats prompt 0 'red car'"),
        (["car", " car"], "prompt 1 'car' repeats prompt 0 'car'"),
    ],
)
def test_a_prompt_given_twice_is_refused_with_the_reason(prompts: list[str], reason: str) -> None:
    """SAM 3's tokenizer lowercases and folds spaces: each would report every object twice."""
    with pytest.raises(InputError) as caught:
        validate_prompts(prompts)
    assert reason in str(caught.value) and "twice" in str(caught.value)


def test_distinct_prompts_are_kept_in_order() -> None:
    assert validate_prompts(["car", "red car", "person"]) == ["car", "red car", "person"]


@given(
    st.text(st.characters(codec="utf-8", exclude_categories=["Cc", "Cs"]), min_size=1, max_size=20),
    st.integers(0, 20),
    st.sampled_from(["\x00", "\n", "\t", "\x1b", "\x7f"]),
)
def test_a_nul_or_other_control_character_inside_is_refused(text: str, at: int, control: str) -> None:
    prompt = "car " + text[:at] + control + text[at:] + " x"
    with pytest.raises(InputError, match="holds a control character"):
        validate_prompts(["person", prompt])


@pytest.mark.parametrize("prompt", ["car\x00", "\x00car", "ca\x00r"])
def test_a_nul_at_either_end_is_refused_not_stripped(prompt: str) -> None:
    with pytest.raises(InputError, match="holds a control character"):
        validate_prompts([prompt])
