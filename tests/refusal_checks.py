"""Shared checks of the refusal tests (test_validation*.py): the token-scanning entry points that take the
same inputs by the same rules, and `rejects`, which requires exactly one exception type and a message."""

from __future__ import annotations

import pytest

from mrope_tracker import PromptLayout, prompt_positions


def from_tokens(config, token_ids, **kwargs):
    layout = PromptLayout.from_tokens(config, token_ids, **kwargs)
    return layout.positions(), layout.delta


# The `scan` fixture (tests/conftest.py) runs a test once with each.
SCANNERS = {"prompt_positions": prompt_positions, "from_tokens": from_tokens}


def rejects(exc: type, match: str, function, *args, **kwargs) -> BaseException:
    """Call function(*args, **kwargs); it must raise exactly `exc` with `match` in its message."""
    with pytest.raises(Exception) as info:
        function(*args, **kwargs)
    assert type(info.value) is exc, f"expected {exc.__name__}, got {type(info.value).__name__}: {info.value}"
    info.match(match)
    return info.value


def ranges(config, num_tokens, **kwargs):
    return PromptLayout.from_ranges(config, num_tokens, **kwargs)
