"""The parsed `MRopeConfig` of a transformers config object, kept between calls.

`hf.get_rope_index(model.config, ...)` runs in every forward pass; parsing
the config each time cost several times the batch itself (104 us against
28.5 us for an already parsed config, issue 27). So the parse is kept per
config object, and reused only while that object still reads the same.

Keyed safely:
- by ``id(config)``, held with a weak reference whose callback drops the
  entry, so a dead config's id reused by a new object never finds it, and
  the cache keeps no config alive. Objects that take no weak reference
  (dicts, paths) are parsed every call, as before.
- by the values the parse read, not by the object alone. The parse reads the
  config through a recorder that notes every attribute it asked for (dotted
  path and value, or that it was absent); a later call re-reads those paths
  and reuses the parse only if every one is unchanged. So a config mutated
  in place (``config.vision_config.spatial_merge_size = 1``, a token id set,
  a list edited) is parsed again, never served stale positions, while a
  change to a field the positions do not depend on (say the attention
  implementation transformers sets on the config) keeps the cache. The
  check costs a few microseconds; nothing is written onto the user's
  config, so ``save_pretrained`` and ``to_dict`` see nothing of ours.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from .config import MRopeConfig

__all__ = ["parsed_config"]

_ABSENT = object()
_PLAIN = (type(None), bool, int, float, str)
_MAX_ENTRIES = 256  # configs alive at once with a parse kept (a process holds a few)


class _Kind:
    """A sub-config read: it must still be an object of this type (its fields are checked one by one)."""

    __slots__ = ("type",)

    def __init__(self, kind: type) -> None:
        self.type = kind


def _instance_dict(obj: Any) -> dict:
    # not vars(obj): that goes through the config class's __getattribute__, which transformers overrides
    # (a few microseconds a read, the bulk of what a parse costs)
    try:
        return object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return {}


# how a recorded read is read again: through getattr (a property, an attribute_map name, anything
# unusual), from the instance dict, or from the class (transformers' model_type is a class attribute)
_GETATTR, _INSTANCE, _CLASS = 0, 1, 2


def _how(obj: Any, name: str, value: Any) -> int:
    """The cheapest way to read `name` of `obj` again that gives what getattr gives."""
    kind = type(obj)
    if name in getattr(kind, "attribute_map", {}):
        return _GETATTR
    in_class = getattr(kind, name, _ABSENT)
    entry = _instance_dict(obj).get(name, _ABSENT)
    data_descriptor = hasattr(type(in_class), "__set__") or hasattr(type(in_class), "__delete__")
    if entry is value and (in_class is _ABSENT or not data_descriptor):  # the instance's own value wins
        return _INSTANCE
    if entry is _ABSENT and in_class is value and not hasattr(in_class, "__get__"):  # a plain class value
        return _CLASS
    return _GETATTR


def _read_again(holder: Any, name: str, how: int) -> Any:
    if how == _INSTANCE:
        return _instance_dict(holder).get(name, _ABSENT)
    if how == _CLASS and name not in _instance_dict(holder):
        return getattr(type(holder), name, _ABSENT)
    return getattr(holder, name, _ABSENT)


class _Recorder:
    """Stands in for a config object during one parse; notes each attribute read as (path of the object
    read from, name, how to read it again, value seen)."""

    __slots__ = ("_target", "_path", "_reads")

    def __init__(self, target: Any, path: str, reads: list) -> None:
        self._target, self._path, self._reads = target, path, reads

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy/pickle/repr probes: not a config read
            raise AttributeError(name)
        value = getattr(self._target, name, _ABSENT)
        how = _how(self._target, name, value)
        if value is _ABSENT:
            self._reads.append((self._path, name, how, _ABSENT))
            raise AttributeError(name)
        if isinstance(value, _PLAIN):
            self._reads.append((self._path, name, how, value))
            return value
        if isinstance(value, (Mapping, list, tuple)):  # compared by value: a copy, so in-place edits show
            self._reads.append((self._path, name, how, copy.deepcopy(value)))
            return value
        self._reads.append((self._path, name, how, _Kind(type(value))))  # a sub-config: its reads follow
        return _Recorder(value, f"{self._path}.{name}", self._reads)


def _unchanged(config: Any, reads: list) -> bool:
    """Whether every recorded read gives the same value now (reads come in order: a sub-config before
    its fields). Runs on every cached call: kept to dict lookups where it can."""
    holders = {"": config}
    dicts = {"": _instance_dict(config)}
    for path, name, how, seen in reads:
        now = dicts[path].get(name, _ABSENT) if how == _INSTANCE else _read_again(holders[path], name, how)
        if seen is _ABSENT or now is _ABSENT:
            if now is not seen:
                return False
        elif type(seen) is _Kind:
            if type(now) is not seen.type:
                return False
            holders[f"{path}.{name}"] = now
            dicts[f"{path}.{name}"] = _instance_dict(now)
        elif type(now) is not type(seen) or now != seen:
            return False
    return True


_entries: dict[tuple[int, str], tuple[weakref.ref, list, MRopeConfig]] = {}
_lock = threading.Lock()


def parsed_config(config: Any, semantics: str) -> MRopeConfig:
    """`MRopeConfig.from_hf_config(config, semantics=semantics)`, reused while
    `config` (an object that takes weak references) reads the same."""
    # by type(): isinstance also asks the object for __class__, through transformers' slow __getattribute__
    if issubclass(type(config), (Mapping, str, bytes, MRopeConfig)) or not _instance_dict(config):
        return MRopeConfig.from_hf_config(config, semantics=semantics)
    key = (id(config), semantics)
    entry = _entries.get(key)
    if entry is not None and entry[0]() is config and _unchanged(config, entry[1]):
        return entry[2]
    try:
        ref = weakref.ref(config, lambda _, key=key: _entries.pop(key, None))
    except TypeError:  # no weak references: parse every call
        return MRopeConfig.from_hf_config(config, semantics=semantics)
    reads: list = []
    try:
        parsed = MRopeConfig.from_hf_config(_Recorder(config, "", reads), semantics=semantics)
    except Exception:  # the plain parse raises the same error, naming the config's own type
        return MRopeConfig.from_hf_config(config, semantics=semantics)
    first = {}
    for read in reads:  # the first read of each path (the parse may read one twice)
        first.setdefault(read[:2], read)
    with _lock:
        if len(_entries) >= _MAX_ENTRIES:
            _entries.clear()
        _entries[key] = (ref, list(first.values()), parsed)
    return parsed
