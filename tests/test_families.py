"""`Family` and `BatchRules` check their own fields: a misspelt record fails
when it is built (at import, for a family module), naming the field."""

import attrs
import pytest

from mrope_tracker.families import FAMILIES, BatchRules, Family


def _rebuilt(**changes) -> Family:
    return attrs.evolve(FAMILIES["qwen2_5_vl"], **changes)


def test_every_family_passes_its_own_checks():
    for family in FAMILIES.values():
        assert attrs.evolve(family) == family


@pytest.mark.parametrize(
    "changes, error, words",
    [
        ({"video_blocks": "frame"}, ValueError, ("video_blocks", "'block', 'frames'", "'frame'")),
        ({"av_pair": "share"}, ValueError, ("av_pair", "'shared'", "'share'")),
        ({"presets": {"vllm-0.34": frozenset()}}, ValueError, ("presets", "vllm-0.33", "'vllm-0.34'")),
        ({"presets": {"vllm-0.33": frozenset({"tau_f65"})}}, ValueError, ("['vllm-0.33']", "tau_f64", "tau_f65")),
        ({"presets": {"vllm-0.33": {"tau_f64"}}}, TypeError, ("presets['vllm-0.33']", "frozenset", "set")),
        ({"model_types": {"qwen2_5_vl": 0}}, TypeError, ("model_types['qwen2_5_vl']", "str", "int")),
        ({"model_types": {}}, ValueError, ("model_types", "at least one")),
        ({"read_config": "read_config"}, TypeError, ("read_config", "callable", "str")),
        ({"interleaves": {"transformers": None}}, TypeError, ("interleaves['transformers']", "callable")),
        ({"scaled_time": 1}, TypeError, ("scaled_time", "bool", "int")),
        ({"default_second_per_grid_ts": 0.0}, ValueError, ("default_second_per_grid_ts", "positive", "0.0")),
        ({"transformers_batch": {"transformers-6": None}}, ValueError, ("transformers_batch", "transformers-4")),
        ({"float_times": frozenset({"transformers-6"})}, ValueError, ("float_times", "reference", "transformers-6")),
        ({"float_times": frozenset({"transformers-5"})}, ValueError, ("float_times", "float_positions")),
        ({"transformers_classes": {"qwen9": ("a", "b", "c")}}, ValueError, ("transformers_classes", "qwen9")),
        ({"av_pair": "shared"}, ValueError, ("av_pair", "audio_tokens")),
    ],
)
def test_a_misspelt_family_fails_naming_the_field(changes, error, words):
    with pytest.raises(error) as info:
        _rebuilt(**changes)
    message = str(info.value)
    assert "qwen2_5_vl" in message or "Family" in message
    for word in words:
        assert word in message


def test_a_misspelt_batch_rule_fails_naming_the_field():
    rules = {"keep": "one", "pad": 1, "padded_delta": True, "text_only": "rows", "type_ids": True}
    assert BatchRules(**rules).keep == "one"
    with pytest.raises(ValueError, match=r"keep: expected one of 'one', 'nonzero', got 'all'"):
        BatchRules(**{**rules, "keep": "all"})
    with pytest.raises(ValueError, match=r"text_only: .*'rows'.*got 'row'"):
        BatchRules(**{**rules, "text_only": "row"})
    with pytest.raises(TypeError, match=r"pad: expected an int, got bool True"):
        BatchRules(**{**rules, "pad": True})


def test_no_private_name_crosses_modules():
    """No module of the package imports another's private names (a package-private module such as
    `families/_spec` is imported by its own package's modules only)."""
    import ast
    import pathlib

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    root = pathlib.Path(__file__).resolve().parent.parent / "src" / "mrope_tracker"
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = set()
        for node in ast.walk(tree):
            ours = isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("mrope"))
            if ours:  # (other libraries' private names are theirs to judge)
                for alias in node.names:
                    own_module = node.level == 1 and node.module is None  # `from . import _float`
                    assert own_module or not private(alias.name), f"{path.name} imports {alias.name} from {node.module}"
                    modules.add(alias.asname or alias.name)
                inside = node.level == 1  # a private module of this module's own package
                assert inside or not private((node.module or "").split(".")[-1]), f"{path.name}: {node.module}"
            elif isinstance(node, ast.Import):
                modules.update(alias.asname or alias.name for alias in node.names if alias.name.startswith("mrope"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                assert not private(node.attr), f"{path.name}: {node.value.id}.{node.attr}"


def test_hf_submodules_import_without_a_cycle():
    """hf's modules depend on each other one way only (the package's __init__ only gathers them)."""
    import ast
    import pathlib

    folder = pathlib.Path(__file__).resolve().parent.parent / "src" / "mrope_tracker" / "hf"
    graph = {}
    for path in folder.glob("*.py"):
        if path.stem == "__init__":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[path.stem] = {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        }
    done: set[str] = set()

    def visit(module: str, path: tuple) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module in done or module not in graph:
            return
        for target in graph[module]:
            visit(target, (*path, module))
        done.add(module)

    for module in graph:
        visit(module, ())
    assert {"drop_in", "patching", "versions", "native", "compare", "sample"} <= set(graph)
