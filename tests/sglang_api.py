"""Record, from SGLang's own source, the names `mrope_tracker.sglang.install()` patches or relies on.

    python tests/sglang_api.py PATH/TO/sglang > tests/data/sglang-0.5.23-api.json

PATH/TO/sglang is the `sglang` package folder of the release (e.g. unzipped
from ``pip download --no-deps sglang==0.5.23``); its sources are read with
`ast`, never imported. For every target of `mrope_tracker.sglang.plugin`
(`FUNCTIONS` and `METHODS`) it writes the parameters (``self`` left out),
and for the classes whose fields the adapter reads, their annotated fields.
tests/test_sglang_plugin.py compares the plugin's expectations with this
record and builds stand-in modules from it.
"""

from __future__ import annotations

import ast
import json
import os
import sys

ROPE_INDEX = "sglang.srt.layers.rotary_embedding.mrope_rope_index"
FUNCTIONS = (
    (ROPE_INDEX, "get_rope_index"),
    (ROPE_INDEX, "get_rope_index_qwen3_omni"),
    (ROPE_INDEX, "get_rope_index_glm4v"),
    (ROPE_INDEX, "get_rope_index_ernie45"),
    ("sglang.srt.managers.mm_utils", "extend_mrope_positions_for_retracted_request"),
)
METHODS = (
    ("sglang.srt.layers.rotary_embedding.mrope", "MRotaryEmbedding", "get_rope_index"),
    ("sglang.srt.layers.rotary_embedding.mrope", "MRotaryEmbedding", "get_rope_index_qwen3_omni"),
    ("sglang.srt.layers.rotary_embedding.mrope", "MRotaryEmbedding", "get_rope_index_glm4v"),
    ("sglang.srt.layers.rotary_embedding.mrope", "MRotaryEmbedding", "get_rope_index_ernie45"),
    ("sglang.srt.model_executor.forward_batch_info", "ForwardBatch", "_compute_mrope_positions"),
    ("sglang.srt.model_executor.forward_batch_info", "ForwardBatch", "compute_spec_mrope_positions"),
    ("sglang.srt.managers.schedule_batch", "Req", "_extend_session_image_inputs"),
    ("sglang.srt.managers.schedule_batch", "MultimodalProcessorOutput", "from_dict"),
    ("sglang.srt.managers.schedule_batch", "MultimodalInputs", "merge"),
    ("sglang.srt.managers.scheduler", "Scheduler", "_maybe_compute_mrope_positions"),
)
FIELDS = (
    ("sglang.srt.managers.schedule_batch", "MultimodalProcessorOutput"),
    ("sglang.srt.managers.schedule_batch", "MultimodalInputs"),
)


def _params(node) -> list[str]:
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args]
    names += ["*" + args.vararg.arg] if args.vararg else []
    names += [a.arg for a in args.kwonlyargs]
    names += ["**" + args.kwarg.arg] if args.kwarg else []
    return [name for name in names if name != "self"]


def _tree(package_dir: str, module: str) -> ast.Module:
    with open(os.path.join(package_dir, *module.split(".")[1:]) + ".py", encoding="utf-8") as f:
        return ast.parse(f.read())


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)


def record(package_dir: str) -> dict:
    functions = {}
    for module, name in FUNCTIONS:
        node = next(n for n in _tree(package_dir, module).body if isinstance(n, ast.FunctionDef) and n.name == name)
        functions[f"{module}:{name}"] = _params(node)
    methods = {}
    for module, cls, name in METHODS:
        body = _class(_tree(package_dir, module), cls).body
        node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        methods[f"{module}:{cls}.{name}"] = {"params": _params(node), "staticmethod": static}
    fields = {}
    for module, cls in FIELDS:
        body = _class(_tree(package_dir, module), cls).body
        names = [n.target.id for n in body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
        fields[f"{module}:{cls}"] = names
    return {
        "how": "written by `python tests/sglang_api.py PATH/TO/sglang` from the sglang package of the release, read "
        "with ast (see that script); do not edit by hand",
        "sglang_version": "0.5.23",
        "functions": functions,
        "methods": methods,
        "fields": fields,
    }


if __name__ == "__main__":
    json.dump(record(sys.argv[1]), sys.stdout, indent=1)
    sys.stdout.write("\n")
