"""Every ```python block of README.md and docs/*.md runs as written, from the repository root.

A block runs on its own, in a fresh namespace, unless an HTML comment on the line just above it says
otherwise:

- ``<!-- snippet: continues -->``: the block goes on from the one before it in the same file (the README's
  API tour, split by prose), so the two run together, in one namespace;
- ``<!-- snippet: skip (REASON) -->``: the block cannot run here (a GPU, vLLM, SGLang, the network); the
  reason is required and shows in pytest's skip list;
- ``<!-- snippet: needs (MODULE[>=MAJOR], ...) -->``: the block runs only where each module imports, at that
  major version or later (transformers, which the core install leaves out; triton >= 3 for its CPU
  interpreter), and skips, naming what is missing, elsewhere (CI's oldest environment).

Any other ``<!-- snippet: ... -->`` comment, or one not followed by a python block, fails the test that
checks the markers, so a typo cannot silently skip a block.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# a marker comment (optional) right above a fenced python block
BLOCK = re.compile(r"(?:^<!-- snippet: (?P<mark>.*?) -->\n)?^```python\n(?P<code>.*?)^```", re.S | re.M)
MARKER = re.compile(r"^<!-- snippet: (?P<mark>.*?) -->$", re.M)
SKIP = re.compile(r"skip \((?P<reason>[^()]*\S[^()]*)\)")
NEEDS = re.compile(r"needs \((?P<needs>[a-z_]+(?:>=\d+)?(?:, [a-z_]+(?:>=\d+)?)*)\)")


def _missing(needs: str) -> str | None:
    """Why a ``needs (...)`` list is not met here, or None when every module imports at its major version."""
    for need in needs.split(", "):
        name, _, major = need.partition(">=")
        try:
            module = __import__(name)
        except ImportError:
            return f"needs {name}, not installed"
        found = getattr(module, "__version__", "0")
        if major and int(found.split(".")[0]) < int(major):
            return f"needs {name} >= {major}, found {found}"
    return None


def _chains(page: pathlib.Path) -> list[tuple[str, str | None, str]]:
    """(id, skip reason or None, code) per chain of blocks: a block and the blocks that continue it."""
    text = page.read_text(encoding="utf-8")
    chains: list[list] = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("code"))  # the line of the opening fence, from 1
        mark, code = match.group("mark"), match.group("code")
        if mark == "continues" and chains:
            chains[-1][2] += "\n" * (line - chains[-1][3]) + code  # keep line numbers in tracebacks
            chains[-1][3] = line + code.count("\n")
            continue
        skip = SKIP.fullmatch(mark) if mark else None
        needs = NEEDS.fullmatch(mark) if mark else None
        reason = skip["reason"] if skip else _missing(needs["needs"]) if needs else None
        chains.append([f"{page.relative_to(ROOT)}:{line}", reason, "\n" * line + code, line])
        chains[-1][3] = line + code.count("\n")
    return [(name, reason, code) for name, reason, code, _ in chains]


CHAINS = [chain for page in PAGES for chain in _chains(page)]


def test_every_page_and_marker_is_well_formed():
    """The pages hold python blocks, and every snippet marker is a known one, right above a python block."""
    assert len(CHAINS) >= 10, [name for name, _, _ in CHAINS]
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        marked = {m.start("mark") for m in BLOCK.finditer(text) if m.group("mark") is not None}
        for marker in MARKER.finditer(text):
            where = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, marker.start()) + 1}"
            mark = marker["mark"]
            known = mark == "continues" or SKIP.fullmatch(mark) or NEEDS.fullmatch(mark)
            assert known, f"{where}: unknown marker {mark!r}"
            assert marker.start("mark") in marked, f"{where}: the marker is not right above a ```python block"
        assert "<!-- snippet:" not in MARKER.sub("", text), f"{page.name}: a snippet marker not on a line of its own"


@pytest.mark.parametrize(("name", "skip", "code"), CHAINS, ids=[name for name, _, _ in CHAINS])
def test_snippet_runs(name, skip, code, monkeypatch):
    """The block (with the blocks that continue it) runs without an error, from the repository root."""
    if skip:
        pytest.skip(skip)
    monkeypatch.chdir(ROOT)
    exec(compile(code, str(ROOT / name.rsplit(":", 1)[0]), "exec"), {"__name__": "__snippet__"})  # noqa: S102
