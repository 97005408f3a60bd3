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
  (C-contiguous int64 arrays, float64 times) (bench/prompt_forms.py).
- `seed_forms`: the seed's six cases with every argument in each of those
  forms at once, against our canonical call and against the seed design
  given the same form (bench/prompt_forms.py).
- `breakdown`: where the time of three seed cases goes: each design's
  kernel alone on a preallocated output, allocating the output, and turning
  Python lists into arrays (our checked conversion and plain numpy's).

Every contender's output is checked against ours before it is timed.
"""

from __future__ import annotations

import numba
import numpy as np

from mrope_tracker import canvas_positions, prompt_positions, reference

from . import seed_design, transformers_rope
from .canvas_workloads import canvas_cases, minicpmv4_7
from .prompt_forms import FORMS, TIME_ARGS, as_form, in_form, input_form_rows, seed_form_rows  # noqa: F401 (re-exported)
from .prompt_forms import same_result as _same
from .timing import measure, medians_us, ratio, torch_threads
from .workloads import (
    family_prompt_cases,
    glm4v,
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
# Where the time goes: kernels alone, allocation, input conversion
# --------------------------------------------------------------------------

BREAKDOWN_CASES = ("1 image", "10 images", "1 video of 200 frames")


def _our_kernel_call(config, ids, kwargs):
    """`prompt_positions`' kernel called alone on a preallocated output,
    with its items as the canonical arrays; None if the package's internals
    changed."""
    try:
        from mrope_tracker.core.inputs import NO_ROWS, NO_SCALES, normalize_items
        from mrope_tracker.kernels.layout_build import FAILED, build_from_tokens
        from mrope_tracker.kernels.layout_emit import NUM_STATE

        out = np.empty((3, ids.shape[0]), np.int64)
        params = config.kernel_params
        scratch = np.empty(NUM_STATE, np.int64)
        items, _ = normalize_items(
            config,
            kwargs.get("image_grid_thw"),
            kwargs.get("video_grid_thw"),
            kwargs.get("second_per_grid_ts"),
            None,
            False,
        )
        call = lambda: build_from_tokens(NO_ROWS, NO_SCALES, scratch, out, ids, params, *items)  # noqa: E731
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
        seed_forms = seed_form_rows(vl_cases, vl, rounds, target_s, progress)
        picked = [case for case in vl_cases if case[0].split(",")[0] in BREAKDOWN_CASES]
        breakdown = breakdown_rows(vl, picked, rounds, target_s, progress)
    return {
        "seed": seed,
        "rows": rows,
        "families": families,
        "more_families": more,
        "input_forms": forms,
        "seed_forms": seed_forms,
        "breakdown": breakdown,
        "torch_threads": 1,
        "transformers": transformers_rope.version(),
    }
