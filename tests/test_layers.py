"""The package's layers: every import inside `mrope_tracker` goes down the layers, never up or sideways.

A module's layer is its subpackage (`core`, `tracker`, ...); the modules at
the package's top (`warmup`, `cli`, the re-exports of moved paths) form the
`top` layer. Layers of one rank are peers that must not import each other.
docs/design.md draws the same tree and says what each layer owns.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "src" / "mrope_tracker"
RANKS = {
    "families": 0,
    "kernels": 0,
    "core": 1,
    "reference": 2,
    "evs": 2,
    "tracker": 3,
    "device": 4,
    "vllm": 5,
    "hf": 5,
    "sglang": 5,
    "top": 6,
    "bench": 5,  # shipped as mrope_tracker.bench (from bench/); only the CLI reaches it
}


# Programs run with `python -m` that no module of the package imports: they sit at the top whatever their folder
# (the SGLang launcher warms the kernels up with the top's `warmup`, and lives beside the adapter it launches)
ENTRY_POINTS = {"mrope_tracker.sglang.launch_server"}


def _module_name(path: pathlib.Path) -> str:
    parts = ["mrope_tracker", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    if module in ENTRY_POINTS or len(parts) < 2 or parts[1] not in RANKS or (PACKAGE / f"{parts[1]}.py").exists():
        return "top"
    return parts[1]


def _imported(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import of this package in the file, lazy ones included."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("mrope_tracker"):
                continue
            if target.count(".") == 0:  # `from .. import reference`: each name is a module of the package
                found.extend((node.lineno, f"{target}.{alias.name}") for alias in node.names)
            else:
                found.append((node.lineno, target))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.startswith("mrope_tracker."))
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_the_layers(path):
    own = _layer(_module_name(path))
    wrong = []
    for line, target in _imported(path):
        other = _layer(target)
        if other != own and RANKS[other] >= RANKS[own]:
            wrong.append(f"line {line}: {own} imports {target} ({other}, rank {RANKS[other]} >= {RANKS[own]})")
    assert not wrong, "\n".join(wrong)


def test_every_subpackage_has_a_layer_and_says_what_it_owns():
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders <= set(RANKS), f"subpackages without a layer in RANKS: {sorted(folders - set(RANKS))}"
    for folder in folders:
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text(encoding="utf-8")))
        assert doc, f"{folder}/__init__.py has no docstring saying what the layer owns"


def test_the_checker_sees_an_upward_import(tmp_path):
    # the rule itself must be able to fail: core importing the tracker is an upward import
    assert RANKS[_layer("mrope_tracker.tracker.position_tracker")] > RANKS[_layer("mrope_tracker.core.layout")]
    assert _layer("mrope_tracker.canvas") == "top"  # a moved path's re-export sits at the top
    assert _layer("mrope_tracker.core.canvas") == "core"


def test_nothing_imports_an_entry_point():
    """The entry points' place at the top holds only while no module of the package imports them."""
    for path in SOURCES:
        for line, target in _imported(path):
            assert target not in ENTRY_POINTS, f"{path.relative_to(PACKAGE)}:{line} imports {target}"
