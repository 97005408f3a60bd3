"""Suite `prompt`: whole-prompt positions, against every baseline we have.

Four parts, all measured in interleaved rounds with torch on one thread (our
kernels use one), each ratio reported as the median, min and max over the
rounds:

- `seed`: the seed PR's six Qwen2/2.5-VL cases (vLLM PR #16881's table)
  against our re-implementation of that PR's design (`seed_design`), once
  with grids as Python lists (what vLLM's V1 runner handed it) and once as
  numpy arrays; and against the write floor, the least any implementation
  must do: allocate the (3, L) int64 output and write it once.
- `rows`: `prompt_positions` against the torch reference
  (`mrope_tracker.reference`), Qwen2/2.5-VL and Qwen2.5-Omni.
  Keye-VL, Keye-VL-1.5, Isaac and openPangu-VL join this table: vLLM 0.33's
  rule is their only one (no transformers implementation).
- `families`: Qwen3-VL and GLM-4.1V (one image, a 64-frame video with
  timestamp text, ten images) against the torch reference and, when
  transformers can be imported, its own `get_rope_index`.
- `more_families`: the families served to vLLM 0.33's rules (PaddleOCR-VL,
  ERNIE-4.5-VL, GLM-OCR, Bailing-MoE-V3-VL, Cohere Compass: one image, ten
  images, a 64-frame video where the family has videos) against the torch
  reference and, where the installed transformers has the family (5.x:
  all but Bailing-MoE-V3-VL; 4.57: none), its own `get_rope_index`.
- `input_forms`: what the form of the inputs costs: every argument of
  `prompt_positions`, `PromptLayout.from_ranges` and the tracker's
  `add_request` / `add_request_from_ranges`, one at a time, as a list, a
  tuple, an int32 (float32) array, a strided and a read-only array, and
  torch tensors, each against the same call with canonical inputs
  (C-contiguous int64 arrays, float64 times).
- `breakdown`: where the time of three seed cases goes: each design's
  kernel alone on a preallocated output, allocating the output, and turning
  Python lists into arrays (our checked conversion and plain numpy's).

Every contender's output is checked against ours before it is timed.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from mrope_tracker import PositionTracker, PromptLayout, canvas_positions, prompt_positions, reference

from . import seed_design, transformers_rope
from .timing import measure, medians_us, ratio, torch_threads
from .workloads import (
    PromptBuilder,
    canvas_cases,
    family_prompt_cases,
    glm4v,
    minicpmv4_7,
    qwen2_5_omni,
    qwen2_5_vl,
    qwen3_vl,
    seed_prompt_cases,
    vllm_families,
    vllm_family_cases,
    vllm_only_family_cases,
)

NUM_LARGE = 3  # the seed cases held to the write-floor target: the three largest


@numba.njit(cache=True, nogil=True)
def _fill(flat):
    for i in range(flat.shape[0]):  # 0-based over a flat view: vectorised
        flat[i] = i


def write_floor(num_tokens: int) -> None:
    """The least any implementation must do: allocate the (3, L) output and
    write every element once (numpy allocation, then a vectorised numba loop,
    faster than ndarray.fill here)."""
    _fill(np.empty((3, num_tokens), np.int64).reshape(-1))


def _same(name: str, got, expected) -> None:
    positions, delta = got
    if isinstance(positions, torch.Tensor):
        positions = positions.numpy()
    if int(delta) != expected[1] or not np.array_equal(positions, expected[0]):
        raise AssertionError(f"{name}: positions differ from prompt_positions'")


# --------------------------------------------------------------------------
# The seed's six cases: seed design (lists, arrays), torch reference, floor
# --------------------------------------------------------------------------


def seed_rows(cases, config, rounds: int, target_s: float, progress=lambda message: None) -> list[dict]:
    """One row per seed case; the three largest carry `large`."""
    rows = []
    largest = sorted(p.num_tokens for _, p in cases)[-NUM_LARGE:]
    for k, (name, prompt) in enumerate(cases):
        progress(f"prompt seed design: {name} ({k + 1}/{len(cases)})")
        ids, arrays = prompt.token_ids, prompt.kwargs
        lists = as_form(arrays, "list")
        ours = prompt_positions(config, ids, **arrays)
        _same(f"prompt_positions, grids as lists, {name}", prompt_positions(config, ids, **lists), ours)
        _same(f"seed design, grids as lists, {name}", seed_design.seed_prompt_positions(config, ids, **lists), ours)
        _same(f"seed design, grids as arrays, {name}", seed_design.seed_prompt_positions(config, ids, **arrays), ours)
        _same(f"torch reference, {name}", reference.prompt_positions(config, ids, **arrays), ours)
        samples = measure(
            {
                "reference": lambda: reference.prompt_positions(config, ids, **arrays),
                "seed_lists": lambda: seed_design.seed_prompt_positions(config, ids, **lists),
                "ours_lists": lambda: prompt_positions(config, ids, **lists),
                "seed_arrays": lambda: seed_design.seed_prompt_positions(config, ids, **arrays),
                "ours_arrays": lambda: prompt_positions(config, ids, **arrays),
                "floor": lambda: write_floor(ids.shape[0]),
            },
            rounds=rounds,
            target_s=target_s,
        )
        us = medians_us(samples)
        rows.append(
            {
                "case": name,
                "num_tokens": prompt.num_tokens,
                **{f"{key}_us": value for key, value in us.items()},
                "speedup_lists": ratio(samples, "seed_lists", "ours_lists"),
                "speedup_arrays": ratio(samples, "seed_arrays", "ours_arrays"),
                "ours_vs_floor": ratio(samples, "ours_arrays", "floor"),
                "seed_vs_floor": ratio(samples, "seed_arrays", "floor"),
                "speedup_reference": ratio(samples, "reference", "ours_arrays"),
                "ceiling": ratio(samples, "reference", "floor"),
                "large": prompt.num_tokens in largest,
            }
        )
    return rows


def reference_row(family: str, name: str, prompt, samples, ours: str = "ours") -> dict:
    """A row of the reference table from samples holding `reference`, `floor` and `ours`."""
    us = medians_us(samples)
    return {
        "family": family,
        "case": name,
        "num_tokens": prompt.num_tokens,
        "reference_us": us["reference"],
        "ours_us": us[ours],
        "floor_us": us["floor"],
        "speedup": ratio(samples, "reference", ours),
        "vs_floor": ratio(samples, ours, "floor"),
        "ceiling": ratio(samples, "reference", "floor"),
    }


def _reference_comparison(label: str, config, name: str, prompt, rounds: int, target_s: float) -> dict:
    """One case: ours equal to the torch reference first, then both timed beside the write floor."""
    ids, kwargs = prompt.token_ids, prompt.kwargs
    _same(
        f"torch reference, {label}, {name}",
        reference.prompt_positions(config, ids, **kwargs),
        prompt_positions(config, ids, **kwargs),
    )
    samples = measure(
        {
            "reference": lambda: reference.prompt_positions(config, ids, **kwargs),
            "ours": lambda: prompt_positions(config, ids, **kwargs),
            "floor": lambda: write_floor(ids.shape[0]),
        },
        rounds=rounds,
        target_s=target_s,
    )
    return reference_row(label, name, prompt, samples)


def omni_rows(config, rounds: int, target_s: float, progress=lambda message: None) -> list[dict]:
    rows = []
    cases = seed_prompt_cases(config)
    for k, (name, prompt) in enumerate(cases):
        progress(f"prompt Qwen2.5-Omni: {name} ({k + 1}/{len(cases)})")
        rows.append(_reference_comparison("Qwen2.5-Omni", config, name, prompt, rounds, target_s))
    return rows


def vllm_family_rows(rounds: int, target_s: float, progress=lambda message: None, cases=None) -> list[dict]:
    """Keye-VL, Keye-VL-1.5, Isaac and openPangu-VL against the torch reference
    (`cases` overrides `vllm_only_family_cases`)."""
    rows = []
    for label, config, name, prompt in cases or vllm_only_family_cases():
        progress(f"prompt {label}: {name}")
        rows.append(_reference_comparison(label, config, name, prompt, rounds, target_s))
    return rows


def canvas_rows(rounds: int, target_s: float, progress=lambda message: None, cases=None) -> list[dict]:
    """MiniCPM-V 4.7's canvas (`canvas_positions`) against the torch reference
    (`cases` overrides `canvas_cases`)."""
    config = minicpmv4_7()
    ref_config = {
        "image_start_id": config.vision_start_token_id,
        "image_end_id": config.vision_end_token_id,
        "slice_start_id": config.slice_start_token_id,
        "slice_end_id": config.slice_end_token_id,
        "newline_id": config.newline_token_id,
        "downsample_mode": "16x",
    }
    rows = []
    for name, prompt in cases or canvas_cases():
        progress(f"prompt MiniCPM-V 4.7: {name}")
        ids, kinds, kwargs = prompt.token_ids, prompt.mm_token_type_ids, prompt.kwargs

        def ours(ids=ids, kinds=kinds, kwargs=kwargs):
            return canvas_positions(config, ids, kinds, **kwargs)

        def theirs(ids=ids, kinds=kinds, kwargs=kwargs):
            return reference.canvas_prompt_positions(ref_config, ids, kinds, **kwargs)

        _same(f"torch reference, MiniCPM-V 4.7, {name}", theirs(), ours())
        samples = measure(
            {"reference": theirs, "ours": ours, "floor": lambda n=ids.shape[0]: write_floor(n)},
            rounds=rounds,
            target_s=target_s,
        )
        rows.append(reference_row("MiniCPM-V 4.7", name, prompt, samples))
    return rows


# --------------------------------------------------------------------------
# Qwen3-VL and GLM: torch reference and transformers' get_rope_index
# --------------------------------------------------------------------------


def family_rows(
    configs, rounds: int, target_s: float, progress=lambda message: None, cases=None, with_hf=None
) -> list[dict]:
    """`configs`: (label, MRopeConfig) pairs; `cases` overrides the workload
    (a function of the config returning (name, prompt) pairs); `with_hf`
    False leaves transformers out (default: when it can be imported). A
    family the installed transformers lacks gets None in its transformers
    columns. transformers is checked against, and timed beside, ours under
    the installed line's preset (`transformers_rope.semantics`): the same
    call, with that line's rules where they differ (ERNIE-4.5-VL's D1)."""
    with_hf = transformers_rope.available() if with_hf is None else with_hf
    rows = []
    for label, config in configs:
        hf_here = with_hf and transformers_rope.implements(config)
        hf_config = transformers_rope.semantics(config) if hf_here else config
        for name, prompt in (cases or family_prompt_cases)(config):
            progress(f"prompt {label}: {name}")
            ids, kwargs = prompt.token_ids, prompt.kwargs
            ours = prompt_positions(config, ids, **kwargs)
            _same(f"torch reference, {label}, {name}", reference.prompt_positions(config, ids, **kwargs), ours)
            contenders = {
                "reference": lambda: reference.prompt_positions(config, ids, **kwargs),
                "ours": lambda: prompt_positions(config, ids, **kwargs),
                "floor": lambda: write_floor(ids.shape[0]),
            }
            ours_hf = "ours"
            if hf_here:
                theirs = transformers_rope.positions(config, ids, kwargs)
                _same(f"transformers, {label}, {name}", theirs, prompt_positions(hf_config, ids, **kwargs))
                contenders["transformers"] = transformers_rope.rope_index_call(config, ids, kwargs)
                if hf_config.switches != config.switches:
                    ours_hf = "ours_transformers_preset"
                    contenders[ours_hf] = lambda: prompt_positions(hf_config, ids, **kwargs)
            samples = measure(contenders, rounds=rounds, target_s=target_s)
            row = reference_row(label, name, prompt, samples)
            row["transformers_us"] = medians_us(samples).get("transformers")
            row["speedup_transformers"] = ratio(samples, "transformers", ours_hf) if hf_here else None
            rows.append(row)
    return rows


# --------------------------------------------------------------------------
# Input forms
# --------------------------------------------------------------------------

# (key, column label): every form an argument comes in besides the canonical
# one (a C-contiguous int64 array; float64 for times). "32-bit" is int32, or
# float32 for a time; "tensor" is torch int64, or float64 for a time.
FORMS = (
    ("list", "list"),
    ("tuple", "tuple"),
    ("32-bit", "32-bit"),
    ("strided", "strided"),
    ("read-only", "read-only"),
    ("tensor", "tensor"),
    ("tensor32", "tensor, 32-bit"),
)
TIME_ARGS = ("second_per_grid_ts",)


def _strided(value: np.ndarray) -> np.ndarray:
    """The same values as a non-contiguous view (every other element of a buffer twice as wide)."""
    wide = np.zeros((*value.shape[:-1], 2 * value.shape[-1]), value.dtype)
    wide[..., ::2] = value
    return wide[..., ::2]


def in_form(value: np.ndarray, form: str, time: bool = False):
    """A canonical argument (an int64 array, or float64 for a time) in
    another form: one of FORMS' keys, or "array" for itself."""
    if form == "array":
        return value
    if form == "list":
        return value.tolist()
    if form == "tuple":
        return tuple(tuple(v) if isinstance(v, list) else v for v in value.tolist())
    if form == "32-bit":
        return value.astype(np.float32 if time else np.int32)
    if form == "strided":
        return _strided(value)
    if form == "read-only":
        out = value.copy()
        out.setflags(write=False)
        return out
    if form == "tensor":
        return torch.from_numpy(value.copy())
    if form == "tensor32":
        return torch.from_numpy(value.astype(np.float32 if time else np.int32))
    raise ValueError(f"form: expected array or one of {', '.join(k for k, _ in FORMS)}, got {form!r}")


def as_form(kwargs: dict, form: str) -> dict:
    """The item arguments (numpy arrays) in another form: "array" (as they
    are), "list", "tuple" or "tensor"."""
    if form not in ("array", "list", "tuple", "tensor"):
        raise ValueError(f"form: expected array, list, tuple or tensor, got {form!r}")
    return {
        key: in_form(value, form, key in TIME_ARGS) if isinstance(value, np.ndarray) else value
        for key, value in kwargs.items()
    }


def _canonical(arrays: dict) -> dict:
    """C-contiguous int64 arrays, float64 times."""
    return {
        key: np.ascontiguousarray(value, np.float64 if key in TIME_ARGS else np.int64) for key, value in arrays.items()
    }


def form_cases() -> dict:
    """The prompts the forms are timed on: Qwen2.5-VL with images and videos
    (every vision argument has rows to convert), Qwen2.5-Omni with audio clips."""
    vl, omni = qwen2_5_vl(), qwen2_5_omni()
    b = PromptBuilder(vl).text(20)
    for _ in range(3):
        b.image(36, 36).text(20)
    for _ in range(2):
        b.video(20, 18, 36).text(20)
    audio = PromptBuilder(omni).text(20)
    for _ in range(3):
        audio.audio_clip(800).text(20)
    return {"vl": (vl, b.build()), "omni": (omni, audio.build())}


FORM_CASE_NAMES = {"vl": "3 images and 2 videos of 20 frames (Qwen2.5-VL)", "omni": "3 audio clips (Qwen2.5-Omni)"}


def _form_plan() -> list[tuple]:
    """(call, argument label, case key, the arguments it varies) per row."""
    vl_grids = ("image_grid_thw", "video_grid_thw")
    vl_ranges = ("image_ranges", "video_ranges")
    return [
        ("prompt_positions", "token_ids", "vl", ("token_ids",)),
        ("prompt_positions", "image_grid_thw", "vl", ("image_grid_thw",)),
        ("prompt_positions", "video_grid_thw", "vl", ("video_grid_thw",)),
        ("prompt_positions", "second_per_grid_ts", "vl", ("second_per_grid_ts",)),
        ("prompt_positions", "audio_feature_lengths", "omni", ("audio_feature_lengths",)),
        ("PromptLayout.from_ranges", "image/video_ranges", "vl", vl_ranges),
        ("PromptLayout.from_ranges", "image/video_grid_thw", "vl", vl_grids),
        ("PromptLayout.from_ranges", "second_per_grid_ts", "vl", ("second_per_grid_ts",)),
        ("add_request", "token_ids", "vl", ("token_ids",)),
        ("add_request", "image/video_grid_thw", "vl", vl_grids),
        ("add_request", "second_per_grid_ts", "vl", ("second_per_grid_ts",)),
        ("add_request_from_ranges", "image/video_ranges", "vl", vl_ranges),
        ("add_request_from_ranges", "image/video_grid_thw", "vl", vl_grids),
        ("add_request_from_ranges", "second_per_grid_ts", "vl", ("second_per_grid_ts",)),
    ]


def _form_call(call: str, config, num_tokens: int, tracker):
    """The call as a function of its arguments (token_ids and ranges
    included); each returns (positions, delta) to check against."""
    if call == "prompt_positions":
        return lambda args: prompt_positions(config, **args)
    if call == "PromptLayout.from_ranges":
        return lambda args: PromptLayout.from_ranges(config, num_tokens, **args)

    # admission: the request is removed again, so every call admits the same one
    add = tracker.add_request if call == "add_request" else tracker.add_request_from_ranges
    first = "token_ids" if call == "add_request" else "num_tokens"

    def admit(args):
        args = dict(args)
        add("r", args.pop(first, num_tokens), **args)
        tracker.remove_request("r")

    return admit


def _check_form(call: str, config, num_tokens: int, tracker, args: dict, expected, what: str) -> None:
    if call == "prompt_positions":
        _same(what, prompt_positions(config, **args), expected)
    elif call == "PromptLayout.from_ranges":
        layout = PromptLayout.from_ranges(config, num_tokens, **args)
        _same(what, (layout.positions(), layout.delta), expected)
    else:
        args = dict(args)
        if call == "add_request":
            tracker.add_request("r", args.pop("token_ids"), **args)
        else:
            tracker.add_request_from_ranges("r", num_tokens, **args)
        positions = tracker.prepare(["r"], [num_tokens])
        _same(what, (positions, tracker.mrope_position_delta("r")), expected)
        tracker.remove_request("r")


def input_form_rows(rounds: int, target_s: float, progress=lambda message: None, plan=None) -> dict:
    """Per (call, argument): the canonical call's median time and each form's
    median ratio to it (with its spread), measured in interleaved rounds.
    `plan` limits the rows (a list of (call, argument) pairs)."""
    cases = form_cases()
    # the calls take microseconds: rounds of a few milliseconds hold hundreds
    target_s = min(target_s, 0.005)
    trackers = {
        key: PositionTracker(config, max_num_reqs=2, max_num_batched_tokens=prompt.num_tokens)
        for key, (config, prompt) in cases.items()
    }
    rows = []
    for call, label, key, varied in _form_plan():
        if plan is not None and (call, label) not in plan:
            continue
        progress(f"prompt input forms: {call}, {label}")
        config, prompt = cases[key]
        tracker, num_tokens = trackers[key], prompt.num_tokens
        base = {
            **prompt.kwargs,
            **({"token_ids": prompt.token_ids} if call in ("prompt_positions", "add_request") else {}),
        }
        if call in ("PromptLayout.from_ranges", "add_request_from_ranges"):
            base.update(prompt.ranges)
        canonical = _canonical(base)
        expected = prompt_positions(config, prompt.token_ids, **prompt.kwargs)
        run = _form_call(call, config, num_tokens, tracker)
        contenders = {"canonical": lambda args=canonical: run(args)}
        for form, _ in FORMS:
            args = {**canonical, **{name: in_form(canonical[name], form, name in TIME_ARGS) for name in varied}}
            _check_form(call, config, num_tokens, tracker, args, expected, f"{call}, {label} as {form}")
            contenders[form] = lambda args=args: run(args)
        samples = measure(contenders, rounds=rounds, target_s=target_s)
        us = medians_us(samples)
        rows.append(
            {
                "call": call,
                "argument": label,
                "case": FORM_CASE_NAMES[key],
                "num_tokens": num_tokens,
                "canonical_us": us["canonical"],
                "us": {form: us[form] for form, _ in FORMS},
                "vs_canonical": {form: ratio(samples, form, "canonical") for form, _ in FORMS},
            }
        )
    return {
        "config": "Qwen2.5-VL; audio_feature_lengths on Qwen2.5-Omni",
        "cases": "; ".join(f"{name}, {cases[key][1].num_tokens:,} tokens" for key, name in FORM_CASE_NAMES.items()),
        "forms": [list(form) for form in FORMS],
        "rows": rows,
    }


# --------------------------------------------------------------------------
# Where the time goes: kernels alone, allocation, input conversion
# --------------------------------------------------------------------------

BREAKDOWN_CASES = ("1 image", "10 images", "1 video of 200 frames")


def _our_kernel_call(config, ids, kwargs):
    """`prompt_positions`' kernel called alone on a preallocated output,
    with its items as the canonical arrays; None if the package's internals
    changed."""
    try:
        from mrope_tracker.core.inputs import normalize_items
        from mrope_tracker.kernels.prompt import FAILED, SCRATCH_SIZE, prompt_from_arrays

        out = np.empty((3, ids.shape[0]), np.int64)
        params = config.kernel_params
        scratch = np.empty(SCRATCH_SIZE, np.int64)
        items, _ = normalize_items(
            config,
            kwargs.get("image_grid_thw"),
            kwargs.get("video_grid_thw"),
            kwargs.get("second_per_grid_ts"),
            None,
            False,
        )
        call = lambda: prompt_from_arrays(out, ids, params, *items, scratch)  # noqa: E731
        if call() == FAILED:
            return None
        return call
    except (ImportError, AttributeError, KeyError, TypeError, ValueError):
        return None


def breakdown_rows(config, cases, rounds: int, target_s: float, progress=lambda message: None) -> list[dict]:
    """Per case, median microseconds of the whole calls and of their parts."""
    from mrope_tracker.core.inputs import as_grid, as_token_ids

    rows = []
    for name, prompt in cases:
        progress(f"prompt breakdown: {name}")
        ids, arrays = prompt.token_ids, prompt.kwargs
        num_tokens = ids.shape[0]
        grid_key = "image_grid_thw" if "image_grid_thw" in arrays else "video_grid_thw"
        grid_list = arrays[grid_key].tolist()
        id_list = ids.tolist()
        sp = arrays.get("second_per_grid_ts")
        sp = np.ones(0, np.float64) if sp is None else sp.astype(np.float64)
        no_grid = np.zeros((0, 3), np.int64)
        grids = (arrays[grid_key], no_grid) if grid_key == "image_grid_thw" else (no_grid, arrays[grid_key])
        out = np.empty((3, num_tokens), np.int64)
        tps = float(config.tokens_per_second or 1.0)
        kernel = _our_kernel_call(config, ids, arrays)
        contenders = {
            "prompt_positions, arrays": lambda: prompt_positions(config, ids, **arrays),
            **({"our kernel alone": kernel} if kernel is not None else {}),
            "seed design, arrays": lambda: seed_design.seed_prompt_positions(config, ids, **arrays),
            "seed kernel alone": lambda: seed_design._seed_vl_positions(
                out, ids, config.image_token_id, config.video_token_id, config.spatial_merge_size, tps, *grids, sp
            ),
            "np.empty((3, L), int64)": lambda: np.empty((3, num_tokens), np.int64),
            "write floor": lambda: write_floor(num_tokens),
            "grid list -> array: ours (as_grid)": lambda: as_grid(grid_list, grid_key),
            "grid list -> array: np.array(.., int64)": lambda: np.array(grid_list, dtype=np.int64),
            "token id list -> array: ours (as_token_ids)": lambda: as_token_ids(id_list),
            "token id list -> array: np.asarray(.., int64)": lambda: np.asarray(id_list, dtype=np.int64),
        }
        us = medians_us(measure(contenders, rounds=rounds, target_s=target_s))
        rows.append({"case": name, "num_tokens": num_tokens, "us": us})
    return rows


def run(quick: bool, progress) -> dict:
    rounds, target_s = (5, 0.004) if quick else (15, 0.02)
    vl = qwen2_5_vl()
    with torch_threads(1):
        vl_cases = seed_prompt_cases(vl)
        seed = seed_rows(vl_cases, vl, rounds, target_s, progress)
        rows = [
            {
                "family": "Qwen2/2.5-VL",
                "case": r["case"],
                "num_tokens": r["num_tokens"],
                "reference_us": r["reference_us"],
                "ours_us": r["ours_arrays_us"],
                "floor_us": r["floor_us"],
                "speedup": r["speedup_reference"],
                "vs_floor": r["ours_vs_floor"],
                "ceiling": r["ceiling"],
            }
            for r in seed
        ]
        rows += omni_rows(qwen2_5_omni(), rounds, target_s, progress)
        rows += vllm_family_rows(rounds, target_s, progress)
        rows += canvas_rows(rounds, target_s, progress)
        families = family_rows((("Qwen3-VL", qwen3_vl()), ("GLM-4.1V", glm4v())), rounds, target_s, progress)
        # transformers 5.x has four of them (4.57 none): their transformers columns stay empty elsewhere
        more = family_rows(vllm_families(), rounds, target_s, progress, cases=vllm_family_cases)
        forms = input_form_rows(rounds, target_s, progress)
        picked = [case for case in vl_cases if case[0].split(",")[0] in BREAKDOWN_CASES]
        breakdown = breakdown_rows(vl, picked, rounds, target_s, progress)
    return {
        "seed": seed,
        "rows": rows,
        "families": families,
        "more_families": more,
        "input_forms": forms,
        "breakdown": breakdown,
        "torch_threads": 1,
        "transformers": transformers_rope.version(),
    }
