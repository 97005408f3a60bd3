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
- `families`: Qwen3-VL and GLM-4.1V (one image, a 64-frame video with
  timestamp text, ten images) against the torch reference and, when
  transformers can be imported, its own `get_rope_index`.
- `input_forms`: what the form of the inputs costs: `prompt_positions` with
  grids as lists, tuples, numpy arrays and torch tensors, token ids as a
  list, and `PromptLayout.from_ranges` with lists and with arrays.
- `breakdown`: where the time of three seed cases goes: each design's
  kernel alone on a preallocated output, allocating the output, and turning
  Python lists into arrays (our checked conversion and plain numpy's).

Every contender's output is checked against ours before it is timed.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from mrope_tracker import PromptLayout, prompt_positions, reference

from . import seed_design, transformers_rope
from .timing import measure, medians_us, ratio, torch_threads
from .workloads import family_prompt_cases, glm4v, qwen2_5_omni, qwen2_5_vl, qwen3_vl, seed_prompt_cases

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


def as_form(kwargs: dict, form: str) -> dict:
    """The item arguments (numpy arrays) in another form: "array" (as they
    are), "list", "tuple" or "tensor"."""
    if form == "array":
        return dict(kwargs)
    out = {}
    for key, value in kwargs.items():
        if not isinstance(value, np.ndarray):
            out[key] = value
        elif form == "list":
            out[key] = value.tolist()
        elif form == "tuple":
            out[key] = tuple(tuple(v) if isinstance(v, list) else v for v in value.tolist())
        elif form == "tensor":
            out[key] = torch.from_numpy(value)
        else:
            raise ValueError(f"form: expected array, list, tuple or tensor, got {form!r}")
    return out


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


def omni_rows(config, rounds: int, target_s: float, progress=lambda message: None) -> list[dict]:
    rows = []
    cases = seed_prompt_cases(config)
    for k, (name, prompt) in enumerate(cases):
        progress(f"prompt Qwen2.5-Omni: {name} ({k + 1}/{len(cases)})")
        ids, kwargs = prompt.token_ids, prompt.kwargs
        _same(
            f"torch reference, {name}",
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
        rows.append(reference_row("Qwen2.5-Omni", name, prompt, samples))
    return rows


# --------------------------------------------------------------------------
# Qwen3-VL and GLM: torch reference and transformers' get_rope_index
# --------------------------------------------------------------------------


def family_rows(configs, rounds: int, target_s: float, progress=lambda message: None, cases=None) -> list[dict]:
    """`configs`: (label, MRopeConfig) pairs; `cases` overrides the workload
    (a function of the config returning (name, prompt) pairs)."""
    with_hf = transformers_rope.available()
    rows = []
    for label, config in configs:
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
            if with_hf:
                _same(f"transformers, {label}, {name}", transformers_rope.positions(config, ids, kwargs), ours)
                contenders["transformers"] = transformers_rope.rope_index_call(config, ids, kwargs)
            samples = measure(contenders, rounds=rounds, target_s=target_s)
            row = reference_row(label, name, prompt, samples)
            row["transformers_us"] = medians_us(samples).get("transformers")
            row["speedup_transformers"] = ratio(samples, "transformers", "ours") if with_hf else None
            rows.append(row)
    return rows


# --------------------------------------------------------------------------
# Input forms
# --------------------------------------------------------------------------

FORMS = ("array", "list", "tuple", "tensor")
FORM_CASES = ("1 image", "10 images", "1 video of 20 frames")  # seed cases the forms are timed on


def input_form_rows(config, cases, rounds: int, target_s: float, progress=lambda message: None) -> list[dict]:
    """Per case: each form's median time and its ratio to the ready-array form."""
    rows = []
    for name, prompt in cases:
        progress(f"prompt input forms: {name}")
        ids, arrays, ranges = prompt.token_ids, prompt.kwargs, prompt.ranges
        num_tokens = prompt.num_tokens
        expected = prompt_positions(config, ids, **arrays)
        contenders = {}
        for form in FORMS:
            kwargs = as_form(arrays, form)
            _same(f"prompt_positions, grids as {form}, {name}", prompt_positions(config, ids, **kwargs), expected)
            contenders[f"prompt_positions: grids as {form}"] = lambda kwargs=kwargs: prompt_positions(
                config, ids, **kwargs
            )
        id_list = ids.tolist()
        _same(f"prompt_positions, token ids as a list, {name}", prompt_positions(config, id_list, **arrays), expected)
        contenders["prompt_positions: token ids as a list"] = lambda: prompt_positions(config, id_list, **arrays)
        for form in ("array", "list", "tensor"):
            kwargs = {**as_form(arrays, form), **as_form(ranges, form)}
            layout = PromptLayout.from_ranges(config, num_tokens, **kwargs)
            _same(f"from_ranges, {form} forms, {name}", (layout.positions(), layout.delta), expected)
            contenders[f"from_ranges: ranges and grids as {form}s"] = lambda kwargs=kwargs: PromptLayout.from_ranges(
                config, num_tokens, **kwargs
            )
        samples = measure(contenders, rounds=rounds, target_s=target_s)
        us = medians_us(samples)
        for contender in contenders:
            base = (
                "from_ranges: ranges and grids as arrays"
                if contender.startswith("from_ranges")
                else ("prompt_positions: grids as array")
            )
            rows.append(
                {
                    "case": name,
                    "num_tokens": num_tokens,
                    "call": contender,
                    "us": us[contender],
                    "vs_array": ratio(samples, contender, base),
                }
            )
    return rows


# --------------------------------------------------------------------------
# Where the time goes: kernels alone, allocation, input conversion
# --------------------------------------------------------------------------

BREAKDOWN_CASES = ("1 image", "10 images", "1 video of 200 frames")


def _our_kernel_call(config, ids, kwargs):
    """`prompt_positions`' kernel called alone on a preallocated output,
    with its items as the canonical arrays; None if the package's internals
    changed."""
    try:
        from mrope_tracker.inputs import normalize_items
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
    from mrope_tracker.inputs import as_grid, as_token_ids

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
        families = family_rows((("Qwen3-VL", qwen3_vl()), ("GLM-4.1V", glm4v())), rounds, target_s, progress)
        picked = [case for case in vl_cases if case[0].split(",")[0] in FORM_CASES]
        forms = input_form_rows(vl, picked, rounds, target_s, progress)
        picked = [case for case in vl_cases if case[0].split(",")[0] in BREAKDOWN_CASES]
        breakdown = breakdown_rows(vl, picked, rounds, target_s, progress)
    return {
        "seed": seed,
        "rows": rows,
        "families": families,
        "input_forms": forms,
        "breakdown": breakdown,
        "torch_threads": 1,
        "transformers": transformers_rope.version(),
    }
