"""Which transformers line is installed, and the preset and batch convention
that follow from it (shared by the drop-in and `patch`)."""

from __future__ import annotations

import functools
import importlib.metadata

from ..families import CONVENTIONS  # how a padded batch is packed, one per transformers line

__all__ = [
    "CONVENTIONS",
    "default_convention",
    "default_semantics",
    "installed_convention",
    "installed_transformers",
    "transformers_major",
]


@functools.lru_cache(maxsize=1)
def installed_transformers() -> str | None:
    """The installed transformers version, or None (read from the package
    metadata, since importing transformers itself is slow)."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def transformers_major(version: str | None = None) -> int | None:
    """The major version of `version` (default: the installed transformers),
    or None when there is none or it does not start with a number."""
    if version is None:
        version = installed_transformers()
        if version is None:
            return None
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def default_semantics() -> str:
    """The preset of the installed transformers: "transformers-5" for 5.x,
    "transformers-4.57" for 4.x (verified on 4.57.6), "reference" when
    transformers is not installed."""
    major = transformers_major()
    if major is None:
        return "reference"
    return "transformers-5" if major >= 5 else "transformers-4.57"


def installed_convention() -> str:
    """The batch convention of the installed transformers line ("transformers-4"
    when none is installed)."""
    major = transformers_major()
    return "transformers-5" if major is not None and major >= 5 else "transformers-4"


def default_convention(semantics: str) -> str:
    """The batch convention of a transformers preset, else of the installed line."""
    if semantics == "transformers-5":
        return "transformers-5"
    if semantics == "transformers-4.57":
        return "transformers-4"
    return installed_convention()
