"""Record, from vLLM's own source, the names `mrope_tracker.vllm.install()` patches.

    python tests/vllm_rope_api.py PATH/TO/vllm > tests/data/vllm-0.33.0-rope-api.json

PATH/TO/vllm is the `vllm` package folder of the release (its sources are read
with `ast`, never imported). It writes the module that defines
`get_rope_state`, its parameters, every module that imports it by name, and
the parameters of each `RopeState` method, which tests/test_vllm_plugin.py
compares with `mrope_tracker.vllm.plugin` and `mrope_tracker.device.rope_state`; and,
for the EVS hook (`mrope_tracker.vllm.evs_plugin`), the parameters of
`MultiModalPruner`'s methods, the names its module imports, and each pruning
model class's `_postprocess_video_embeds_evs` with the names its module
imports.
"""

from __future__ import annotations

import ast
import json
import os
import sys

from mrope_tracker.bench.vllm_sources import release

DEFINING = "vllm.v1.worker.gpu.mm.rope"
PRUNER = ("vllm.v1.worker.gpu.model_states.mm_pruning", "MultiModalPruner")
PRUNING_MODELS = (
    ("vllm.model_executor.models.qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration"),
    ("vllm.model_executor.models.qwen3_vl", "Qwen3VLForConditionalGeneration"),
)


def _params(node: ast.FunctionDef) -> list[str]:
    args = node.args
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg != "self"]


def _module_api(package_dir: str, module: str, class_name: str) -> dict:
    """The class's methods' parameters and the names the module imports."""
    with open(os.path.join(package_dir, *module.split(".")[1:]) + ".py", encoding="utf-8") as f:
        tree = ast.parse(f.read())
    imported = sorted(a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names)
    methods = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            methods = {item.name: _params(item) for item in node.body if isinstance(item, ast.FunctionDef)}
    return {"module": module, "class": class_name, "imports": imported, "methods": methods}


def record(package_dir: str) -> dict:
    root = os.path.dirname(os.path.abspath(package_dir))
    rope_path = os.path.join(package_dir, *DEFINING.split(".")[1:]) + ".py"
    with open(rope_path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    functions, methods = {}, {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            functions[node.name] = _params(node)
        if isinstance(node, ast.ClassDef) and node.name == "RopeState":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and (item.name == "__init__" or not item.name.startswith("_")):
                    methods[item.name] = _params(item)
    importers = {}
    for folder, _, files in os.walk(package_dir):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                try:
                    module_tree = ast.parse(f.read())
                except SyntaxError:
                    continue
            module = os.path.relpath(path, root)[:-3].replace(os.sep, ".").removesuffix(".__init__")
            for node in ast.walk(module_tree):
                if isinstance(node, ast.ImportFrom) and node.module == DEFINING:
                    imported = sorted(a.name for a in node.names if a.name in ("get_rope_state", "RopeState"))
                    if imported:
                        importers[module] = sorted(set(importers.get(module, [])) | set(imported))
    return {
        "how": "written by `python tests/vllm_rope_api.py PATH/TO/vllm` from the vllm package of the release, "
        "read with ast (see that script); do not edit by hand",
        "vllm_version": release(package_dir),
        "defining_module": DEFINING,
        "get_rope_state": functions["get_rope_state"],
        "importers": dict(sorted(importers.items())),
        "RopeState": methods,
        "evs_pruner": _module_api(package_dir, *PRUNER),
        "evs_models": [_module_api(package_dir, *model) for model in PRUNING_MODELS],
    }


if __name__ == "__main__":
    json.dump(record(sys.argv[1]), sys.stdout, indent=1)
    sys.stdout.write("\n")
