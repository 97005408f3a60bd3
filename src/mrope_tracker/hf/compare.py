"""`mrope-tracker compare`: where the semantics presets disagree, on which
prompts, and which divergence explains each difference.

Every prompt is positioned under each preset ("reference", "vllm-0.33",
"transformers-4.57", "transformers-5", "sglang-0.5"; docs/semantics.md). For each pair of
presets we report the share of prompts whose positions (or delta) differ, an
example with its first differing token, and the divergences behind the
differences. A difference is explained by the smallest set of the pair's
differing switches that, turned over from the first preset's rules alone,
reproduces the second preset's positions exactly; each switch is one named
divergence (D1, D2, ...).

Prompts come from a JSONL file (`mrope_tracker.hf.sample.read_prompts`) or from
`mrope_tracker.hf.sample.sample_prompts`, a seeded random sample of realistic prompts.

Prompts are single unpadded sequences: the batch conventions of a padded
batch (D10) are the drop-in's business (`mrope_tracker.hf.get_rope_index`), not a position rule.
"""

from __future__ import annotations

import contextlib
import itertools
import os

import attrs
import numpy as np

from .. import reference
from ..core.canvas import canvas_positions
from ..core.config import SUPPORTED_MODEL_TYPES, MRopeConfig
from ..core.positions import prompt_positions
from ..families import FAMILIES, SEMANTICS
from .sample import CanvasPrompt, Prompt, read_prompts, sample_prompts
from .versions import default_convention

__all__ = ["Prompt", "compare", "load_config", "markdown", "read_prompts", "sample_prompts"]

# What each switch (or other difference between presets) is called in docs/semantics.md.
DIVERGENCES = {
    "next_hw": "D1",  # transformers 5: text resumes at s + max(h', w') after a vision block
    "int_sp": "D2",  # transformers 4.57: second_per_grid_ts truncated to an int
    "tau_f64": "D3",  # vLLM 0.33: float64 temporal products
    "av_shift": "D5",  # vLLM 0.33: Qwen2.5-Omni audio-in-video one token early (D6 with empty chunks)
    "av_eos_block": "D8",  # vLLM 0.33: Qwen3-Omni eos after the whole block
    "av_merge_tau": "D8",  # vLLM 0.33: Qwen3-Omni merge on truncated times
    "float_times": "D8",  # transformers: Qwen3-Omni times kept as float32
    "tokens_per_second": "D7",  # which config field scales Omni time
    "n_window": "D8",  # transformers 5 reads Qwen3-Omni's audio window from the config
    "tau_rate_first": "transformers 5 product order",  # Qwen2.5-VL frame f times float32(sp * r)
    "canvas_flag": "D12",  # vLLM 0.33: MiniCPM-V 4.7's canvas only with the config's flag
    "float_carry": "S1",  # SGLang 0.5: Qwen3-Omni float32 positions truncated (times carried across items)
    "items_after_vision_start": "D13",  # transformers 4.57, SGLang 0.5: runs without vision_start refused
}
# Marker ids for a canvas family's bare model type (none published): only which token is which matters
_CANVAS_STANDINS = {
    "vision_start_token_id": 900,
    "vision_end_token_id": 901,
    "slice_start_token_id": 902,
    "slice_end_token_id": 903,
    "newline_token_id": 904,
}
_FIELDS = ("tokens_per_second", "n_window")


# --------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------


def load_config(source, semantics: str = "reference") -> MRopeConfig:
    """A config.json path, a model folder, or a model type (its family's
    defaults, `Family.defaults`; MiniCPM-V 4.7's markers, never published,
    as stand-ins)."""
    if isinstance(source, str) and not os.path.exists(source):
        if source in SUPPORTED_MODEL_TYPES:
            family = SUPPORTED_MODEL_TYPES[source]
            standins = _CANVAS_STANDINS if FAMILIES[family].canvas else {}
            return MRopeConfig(family=family, model_type=source, semantics=semantics, **standins)
        raise ValueError(
            f"config: expected a config.json path, a model folder or a model type "
            f"({', '.join(sorted(SUPPORTED_MODEL_TYPES))}), got {source!r}"
        )
    return MRopeConfig.from_hf_config(source, semantics=semantics)


# --------------------------------------------------------------------------
# Positions under a set of rules
# --------------------------------------------------------------------------


@attrs.frozen
class _Rules:
    """A preset taken apart: its switches, its config fields, its float times."""

    switches: frozenset
    fields: tuple  # ((name, value), ...) for _FIELDS
    float_times: bool  # video times kept as unrounded float32 (`Family.float_times`: Qwen3-Omni, transformers)

    def items(self) -> frozenset:
        out = set(self.switches)
        out |= {f"{name}={value}" for name, value in self.fields}
        if self.float_times:
            out.add("float_times")
        return frozenset(out)


def _rules_of(config: MRopeConfig) -> _Rules:
    return _Rules(
        switches=config.switches,
        fields=tuple((name, getattr(config, name)) for name in _FIELDS if getattr(config, name) is not None),
        float_times=config.semantics in config.spec.float_times,
    )


@contextlib.contextmanager
def _preset(family: str, switches: frozenset):
    """The family's "reference" preset holds `switches` for the duration (the
    switches are read when a config is built and when it is used)."""
    spec = FAMILIES[family]
    FAMILIES[family] = attrs.evolve(spec, presets={**spec.presets, "reference": frozenset(switches)})
    try:
        yield
    finally:
        FAMILIES[family] = spec


def _positions(base: MRopeConfig, rules: _Rules, prompt: Prompt) -> tuple[np.ndarray, float]:
    """(3, L) float64 positions and delta of `prompt` under `rules`."""
    kwargs = prompt.kwargs()
    with _preset(base.family, rules.switches):
        config = attrs.evolve(base, semantics="reference", **dict(rules.fields))
        if rules.float_times and _has_fractional_times(config, prompt):
            pos, delta = reference.prompt_positions(config, prompt.token_ids, float_positions=True, **kwargs)
            return pos.numpy().astype(np.float64), float(delta)
        if isinstance(prompt, CanvasPrompt):
            pos, delta = canvas_positions(config, prompt.token_ids, prompt.mm_token_type_ids, **kwargs)
        else:
            pos, delta = prompt_positions(config, prompt.token_ids, **kwargs)
        return pos.astype(np.float64), float(delta)


def _has_fractional_times(config: MRopeConfig, prompt: Prompt) -> bool:
    if prompt.video_grid_thw is None:
        return False
    sps = prompt.second_per_grid_ts
    r = np.float32(config.tokens_per_second)
    for k, (t, _, _) in enumerate(prompt.video_grid_thw):
        sp = np.float32(config.spec.default_second_per_grid_ts if sps is None else sps[k])
        times = (np.arange(t, dtype=np.float32) * sp).astype(np.float32) * r
        if np.any(times != np.floor(times)):
            return True
    return False


def _toggled(a: _Rules, b: _Rules, subset: frozenset) -> _Rules:
    """`a` with the differences named in `subset` taken from `b`."""
    switches = set(a.switches)
    for s in subset & (a.switches ^ b.switches):
        switches ^= {s}
    fields = dict(a.fields)
    for name, value in b.fields:
        if f"{name}={value}" in subset:
            fields[name] = value
    return _Rules(
        switches=frozenset(switches),
        fields=tuple(sorted(fields.items())),
        float_times=b.float_times if "float_times" in subset else a.float_times,
    )


def _differences(a: _Rules, b: _Rules) -> list[str]:
    """What differs between two rule sets, each as one togglable name."""
    out = sorted(a.switches ^ b.switches)
    fa, fb = dict(a.fields), dict(b.fields)
    out += [f"{name}={fb[name]}" for name in sorted(fb) if fa.get(name) != fb[name]]
    if a.float_times != b.float_times:
        out.append("float_times")
    return out


def _label(item: str, config: MRopeConfig, prompt: Prompt) -> str:
    name = item.split("=", 1)[0]
    label = DIVERGENCES.get(name, name)
    if name == "av_shift" and _has_empty_chunks(config, prompt):
        label = "D5+D6"
    return label


def _has_empty_chunks(config: MRopeConfig, prompt: Prompt) -> bool:
    """An audio-in-video frame that jumps over a whole chunk (sp * r > C)."""
    if not prompt.use_audio_in_video or prompt.video_grid_thw is None or config.audio_chunk_positions is None:
        return False
    sps = prompt.second_per_grid_ts
    default = config.spec.default_second_per_grid_ts
    return any(
        (default if sps is None else float(sps[k])) * config.tokens_per_second > config.audio_chunk_positions
        for k in range(prompt.video_grid_thw.shape[0])
    )


def _same(x, y) -> bool:
    return x[1] == y[1] and x[0].shape == y[0].shape and np.array_equal(x[0], y[0])


def _explain(base: MRopeConfig, a: _Rules, b: _Rules, target, prompt: Prompt) -> list[str]:
    """The smallest set of differences that turns `a`'s positions into `target`."""
    diffs = _differences(a, b)
    for size in range(1, len(diffs) + 1):
        for subset in itertools.combinations(diffs, size):
            try:
                got = _positions(base, _toggled(a, b, frozenset(subset)), prompt)
            except (ValueError, TypeError):
                continue
            if _same(got, target):
                return list(subset)
    return []


# --------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------


def compare(
    config_source, prompts: list[Prompt] | None = None, presets=SEMANTICS, *, num_prompts: int = 200, seed: int = 0
) -> dict:
    """Compare `presets` pairwise on `prompts` (default: `sample_prompts` of
    the family). Returns a dict: family, model_type, number of prompts, their
    source, per preset the prompts it refused (ValueError), and per pair the
    differing prompts, their share, the divergences that explain them (with
    counts) and the first differing prompt as an example."""
    presets = list(presets)
    for p in presets:
        if p not in SEMANTICS:
            raise ValueError(f"presets: expected names from {', '.join(SEMANTICS)}, got {p!r}")
    if len(presets) < 2 or len(set(presets)) != len(presets):
        raise ValueError(f"presets: expected at least two distinct presets, got {presets}")
    configs = {p: load_config(config_source, semantics=p) for p in presets}
    base = configs[presets[0]]
    source = "file"
    if prompts is None:
        prompts = sample_prompts(base, num_prompts, seed)
        source = f"sample (seed {seed})"
    rules = {p: _rules_of(configs[p]) for p in presets}
    results: dict[str, list] = {p: [] for p in presets}
    refused: dict[str, int] = {p: 0 for p in presets}
    first_refusal: dict[str, dict] = {}  # per preset, the first prompt it refused and why
    for k, prompt in enumerate(prompts):
        for p in presets:
            try:
                results[p].append(_positions(base, rules[p], prompt))
            except (ValueError, TypeError) as exc:
                results[p].append(None)
                refused[p] += 1
                first_refusal.setdefault(p, {"prompt": k, "error": f"{type(exc).__name__}: {exc}"})
    pairs = []
    for a, b in itertools.combinations(presets, 2):
        differ, total, counts, example = 0, 0, {}, None
        for k, prompt in enumerate(prompts):
            ra, rb = results[a][k], results[b][k]
            if ra is None or rb is None:
                continue
            total += 1
            if _same(ra, rb):
                continue
            differ += 1
            explained = _explain(base, rules[a], rules[b], rb, prompt)
            label = "+".join(sorted({_label(x, base, prompt) for x in explained})) or "unexplained"
            counts[label] = counts.get(label, 0) + 1
            if example is None:
                example = _example(k, ra, rb, label)
        pairs.append(
            {
                "a": a,
                "b": b,
                "differ": differ,
                "total": total,
                "share": differ / total if total else 0.0,
                "divergences": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
                "example": example,
            }
        )
    return {
        "family": base.family,
        "model_type": base.model_type,
        "prompts": len(prompts),
        "source": source,
        "presets": presets,
        "refused": refused,
        "first_refusal": first_refusal,
        "pairs": pairs,
        # transformers presets of a line that has no get_rope_index for the family (they give our rules)
        "no_model": [p for p in presets if p.startswith("transformers") and not _has_model(base, p)],
    }


def _has_model(config: MRopeConfig, preset: str) -> bool:
    return default_convention(preset) in config.spec.transformers_batch


def _number(x: float):
    return int(x) if float(x).is_integer() else round(float(x), 4)


def _example(index: int, ra, rb, label: str) -> dict:
    (pa, da), (pb, db) = ra, rb
    cols = np.flatnonzero(np.any(pa != pb, axis=0)) if pa.shape == pb.shape else np.array([0])
    token = int(cols[0]) if cols.size else None
    return {
        "prompt": index,
        "token": token,
        "a": None if token is None else [_number(v) for v in pa[:, token]],
        "b": None if token is None else [_number(v) for v in pb[:, token]],
        "delta_a": _number(da),
        "delta_b": _number(db),
        "divergences": label,
    }


def markdown(result: dict) -> str:
    """The comparison as a Markdown table, one row per pair of presets."""
    lines = [
        f"{result['model_type']} ({result['family']}): {result['prompts']} prompts, {result['source']}",
        "",
        "| presets | prompts that differ | share | explained by | example: first differing token |",
        "|---|---|---|---|---|",
    ]
    for pair in result["pairs"]:
        div = ", ".join(f"{k} ({v})" for k, v in pair["divergences"].items()) or "-"
        ex = pair["example"]
        if ex is None:
            example = "-"
        elif ex["token"] is None:
            example = f"prompt {ex['prompt']}: delta {ex['delta_a']} vs {ex['delta_b']} ({ex['divergences']})"
        else:
            a, b = (tuple(v) for v in (ex["a"], ex["b"]))
            example = f"prompt {ex['prompt']}, token {ex['token']}: (T, H, W) {a} vs {b} ({ex['divergences']})"
        lines.append(
            f"| {pair['a']} vs {pair['b']} | {pair['differ']} / {pair['total']} | {100 * pair['share']:.1f}% | "
            f"{div} | {example} |"
        )
    if result.get("no_model"):
        lines += [
            "",
            f"No model in {', '.join(result['no_model'])}: that transformers line has no get_rope_index for "
            f"{result['family']}; its preset gives the reference rules.",
        ]
    refused = {k: v for k, v in result["refused"].items() if v}
    if refused:
        lines += [
            "",
            "Refused prompts (left out of the pairs above): " + ", ".join(f"{k} {v}" for k, v in refused.items()),
        ]
        for (prompt, error), names in refusal_reasons(result).items():
            lines.append(f"- prompt {prompt}, first refused by {', '.join(names)}: {error}")
    return "\n".join(lines)


def refusal_reasons(result: dict) -> dict[tuple[int, str], list[str]]:
    """(prompt index, error) -> the presets whose first refusal it was: one entry when all agree."""
    reasons: dict[tuple[int, str], list[str]] = {}
    for preset, first in result.get("first_refusal", {}).items():
        reasons.setdefault((first["prompt"], first["error"]), []).append(preset)
    return reasons
