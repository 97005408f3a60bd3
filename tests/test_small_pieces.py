"""House rules on the package's source (issue 27, "small pieces"), read with ast:

- no function over MAX_FUNCTION_LINES lines and no module over MAX_MODULE_LINES,
  unless it says why in a `# long: <reason>` comment: for a function on its
  decorator or `def` lines, for a module on a line of its own before the first
  statement after the docstring;
- every public module-level constant (an UPPER_CASE name) is defined in one
  module only, so a name means one thing across the package.
"""

import ast
import collections
import pathlib
import re

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "mrope_tracker"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500
LONG_MARKER = re.compile(r"#\s*long:\s*\S")
CONSTANT = re.compile(r"[A-Z][A-Z0-9_]*")
# names several modules define on purpose, each with its reason
SHARED_NAMES = {
    "FAMILY": "each families/ module's spec, the name the registry reads from every one of them",
}


def _modules():
    return sorted(SRC.rglob("*.py"))


def _short(path) -> str:
    return str(path.relative_to(SRC)) if path.is_relative_to(SRC) else str(path)


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def _module_excused(lines, tree) -> bool:
    """A `# long:` line above the module's first statement after its docstring."""
    body = tree.body
    first = body[1] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else None
    if first is None and body:
        first = body[0]
    stop = first.lineno - 1 if first is not None else len(lines)
    return any(LONG_MARKER.match(line.strip()) for line in lines[:stop])


def _function_excused(lines, node) -> bool:
    """A `# long:` comment on the function's decorator or `def` lines."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    header_end = node.body[0].lineno - 1  # the signature's last line (the docstring or first statement follows)
    return any(LONG_MARKER.search(line) for line in lines[first - 1 : max(header_end, node.lineno)])


def long_pieces(paths) -> list[str]:
    """'path:line name (n lines)' for each function or module past its limit without a reason."""
    found = []
    for path in paths:
        lines = _lines(path)
        tree = ast.parse("\n".join(lines), filename=str(path))
        if len(lines) > MAX_MODULE_LINES and not _module_excused(lines, tree):
            found.append(f"{_short(path)}: module ({len(lines)} lines)")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and not _function_excused(lines, node):
                    found.append(f"{_short(path)}:{node.lineno} {node.name} ({length} lines)")
    return found


def constant_owners(paths) -> dict[str, list[str]]:
    """Each public UPPER_CASE name assigned at module level -> the modules that assign it."""
    owners = collections.defaultdict(list)
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(name, ast.Name) and CONSTANT.fullmatch(name.id):
                        owners[name.id].append(_short(path))
    return owners


def test_no_long_function_or_module_without_a_reason():
    assert long_pieces(_modules()) == []


def test_no_constant_defined_in_two_modules():
    repeated = {
        name: where
        for name, where in constant_owners(_modules()).items()
        if len(set(where)) > 1 and name not in SHARED_NAMES
    }
    assert repeated == {}


def test_shared_names_are_still_shared():
    """An exception that no longer applies is removed, not kept."""
    owners = constant_owners(_modules())
    for name in SHARED_NAMES:
        assert len(set(owners[name])) > 1, name


def _write(tmp_path, name, text) -> pathlib.Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_scans_find_what_they_look_for(tmp_path):
    """The checks above can fail: a long function, a long module and a repeated constant are each found,
    and a `# long:` reason lets the first two through."""
    body = "".join(f"    x{k} = {k}\n" for k in range(MAX_FUNCTION_LINES))
    long_def = _write(tmp_path, "a.py", f'"""doc"""\n\nLIMIT = 1\n\n\ndef f():\n{body}')
    excused_def = _write(tmp_path, "b.py", f'"""doc"""\n\nLIMIT = 2\n\n\ndef f():  # long: a table\n{body}')
    filler = "".join(f"Y{k} = {k}\n" for k in range(MAX_MODULE_LINES))
    long_module = _write(tmp_path, "c.py", f'"""doc"""\n\n{filler}')
    excused_module = _write(tmp_path, "d.py", f'"""doc"""\n\n# long: generated table\n{filler}')
    found = long_pieces([long_def, excused_def])
    assert len(found) == 1 and found[0].startswith(f"{long_def}:6 f (")
    assert len(long_pieces([long_module, excused_module])) == 1
    owners = constant_owners([long_def, excused_def])
    assert len(owners["LIMIT"]) == 2


def test_triton_constexpr_copies_equal_their_originals():
    """device/triton_step.py's TL_* constexprs are copies (Triton reads only constexpr globals):
    each equals the one definition it copies."""
    try:  # (pytest 8.0, the oldest we allow, has no importorskip(exc_type=...))
        from mrope_tracker.device import triton_step
    except ImportError as error:
        pytest.skip(f"triton_step does not import here: {error}")
    from mrope_tracker.device import rows
    from mrope_tracker.kernels import layout_codes

    originals = {"WIDTH": rows.NUM_DEVICE_COLS, "SLOT_WIDTH": rows.NUM_SLOT_COLS}
    copies = {name: value for name, value in vars(triton_step).items() if name.startswith("TL_")}
    assert len(copies) >= 20
    for name, value in copies.items():
        original = name[len("TL_") :]
        expected = originals.get(original, getattr(layout_codes, original, getattr(rows, original, None)))
        assert expected is not None, f"{name}: no original named {original}"
        assert value.value == expected, name
