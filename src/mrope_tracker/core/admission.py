"""Admission: who holds which slot, and what a request must pass before it gets one.

`RequestSlots` maps the engine's request ids to slots (rows of the
tracker's `slot_state`, stable for a request's lifetime) and keeps the free
slots. The checks here run before anything is built or committed, so a
refused `add_request*` call changes nothing: a new hashable id and a free
slot, a cached-token count the tracker's limits allow, and a `PromptLayout`
built under the tracker's own config.
"""

from __future__ import annotations

from collections.abc import Hashable

import attrs

from .config import MRopeConfig
from .inputs import as_index
from .layout import PromptLayout

__all__ = ["RequestSlots", "check_num_computed", "check_layout"]


class RequestSlots:
    """``slot_of`` (req_id -> slot), ``req_of_slot`` (slot -> req_id or None)
    and ``free`` (the free slots; ``pop()`` gives the lowest first)."""

    def __init__(self, max_num_reqs: int) -> None:
        self.max_num_reqs = max_num_reqs
        self.slot_of: dict[Hashable, int] = {}
        self.req_of_slot: list[Hashable | None] = [None] * max_num_reqs
        self.free = list(range(max_num_reqs - 1, -1, -1))

    def check_new(self, req_id) -> None:
        """Raise unless `req_id` is a hashable id not tracked yet and a slot is free."""
        try:
            known = req_id in self.slot_of
        except TypeError:
            raise TypeError(f"req_id: expected a hashable id, got {type(req_id).__name__}") from None
        if known:
            raise ValueError(f"req_id: expected a new request id, got {req_id!r}, which is already tracked")
        if not self.free:
            raise ValueError(
                f"req_id: no free slot for {req_id!r}: all max_num_reqs={self.max_num_reqs} slots are in use"
            )

    def take(self, req_id) -> int:
        """Give `req_id` (checked by `check_new`) the lowest free slot."""
        slot = self.free.pop()
        self.slot_of[req_id] = slot
        self.req_of_slot[slot] = req_id
        return slot

    def release(self, req_id) -> int:
        """Free the slot of `req_id` (a tracked id) and return it."""
        slot = self.slot_of.pop(req_id)
        self.req_of_slot[slot] = None
        self.free.append(slot)
        return slot

    def slot(self, req_id) -> int:
        try:
            return self.slot_of[req_id]
        except KeyError:
            raise KeyError(f"req_id: expected a tracked request id, got {req_id!r}") from None
        except TypeError:
            raise TypeError(f"req_id: expected a hashable id, got {type(req_id).__name__}") from None


def check_num_computed(num_computed_tokens, num_tokens: int, prompt_arg: str, max_model_len: int | None) -> int:
    """The checked cached-token count of a prompt of `num_tokens` tokens (given as `prompt_arg`)."""
    if max_model_len is not None and num_tokens > max_model_len:
        raise ValueError(
            f"{prompt_arg}: expected a prompt of at most max_model_len={max_model_len} tokens, got {num_tokens}"
        )
    # Past the prompt is a resumed request whose generated tokens are
    # cached too: they sit at index + delta like any decode token.
    num_computed_tokens = as_index(num_computed_tokens, "num_computed_tokens")
    if max_model_len is not None and num_computed_tokens > max_model_len:
        raise ValueError(
            f"num_computed_tokens: expected at most max_model_len={max_model_len}, got {num_computed_tokens}"
        )
    return num_computed_tokens


# What decides a layout's rows: every config field but model_type, which
# only names the checkpoint (Qwen3-VL and its MoE variant share their rules).
_RULE_FIELDS = tuple(f.name for f in attrs.fields(MRopeConfig) if f.eq and f.name != "model_type")


def _describe(config: MRopeConfig, fields: tuple[str, ...]) -> str:
    extra = "".join(f", {name}={getattr(config, name)!r}" for name in fields)
    return f"{config.family} (semantics {config.semantics!r}{extra})"


def check_layout(layout, config: MRopeConfig) -> None:
    """Raise unless `layout` is a `PromptLayout` this tracker's `config` can
    serve: one built under the same rules (a layout that records no config,
    such as one constructed directly from its tables, is taken as it is)."""
    if not isinstance(layout, PromptLayout):
        raise TypeError(f"layout: expected a PromptLayout, got {type(layout).__name__}")
    built = layout.config
    if built is None or built is config:
        return
    differ = tuple(name for name in _RULE_FIELDS if getattr(built, name) != getattr(config, name))
    if differ:
        # Family and semantics name the rules; only between configs they do
        # not tell apart are the other fields that differ spelled out.
        named = built.family != config.family or built.semantics != config.semantics
        shown = () if named else differ
        raise ValueError(
            f"layout: built for {_describe(built, shown)}, but this tracker serves {_describe(config, shown)}"
        )
