"""Suite `prompt`: the seed PR's piecewise table (whole-prompt positions).

For every seed case: the public `prompt_positions` call (input checks
included) against the torch reference, and against the floor of merely
allocating and writing the (3, L) int64 output. Inputs are numpy arrays for
both (the reference converts them to tensors itself).
"""

from __future__ import annotations

import numba
import numpy as np

from mrope_tracker import prompt_positions, reference

from .timing import compare
from .workloads import qwen2_5_omni, qwen2_5_vl, seed_prompt_cases

LARGE_CASE_TOKENS = 3000  # "the large cases" of issue 2


@numba.njit(cache=True, nogil=True)
def _fill(flat):
    for i in range(flat.shape[0]):  # 0-based over a flat view: vectorised
        flat[i] = i


def write_floor(num_tokens: int) -> None:
    """The least any implementation must do: allocate the (3, L) output and
    write every element once (numpy allocation, then a vectorised numba loop,
    faster than ndarray.fill here)."""
    _fill(np.empty((3, num_tokens), np.int64).reshape(-1))


def run(quick: bool, progress) -> dict:
    rows = []
    for family, config in (("Qwen2/2.5-VL", qwen2_5_vl()), ("Qwen2.5-Omni", qwen2_5_omni())):
        cases = seed_prompt_cases(config)
        for k, (name, prompt) in enumerate(cases):
            progress(f"prompt {family}: {name} ({k + 1}/{len(cases)})")
            ids, kwargs = prompt.token_ids, prompt.kwargs
            ours, delta = prompt_positions(config, ids, **kwargs)
            ref, ref_delta = reference.prompt_positions(config, ids, **kwargs)
            if delta != ref_delta or not np.array_equal(ours, ref.numpy()):
                raise AssertionError(f"prompt positions differ from the reference on {family} / {name}")
            times = compare(
                {
                    "reference": lambda: reference.prompt_positions(config, ids, **kwargs),
                    "ours": lambda: prompt_positions(config, ids, **kwargs),
                    "floor": lambda: write_floor(ids.shape[0]),
                },
                rounds=5 if quick else 15,
                target_s=0.004 if quick else 0.02,
            )
            rows.append(
                {
                    "family": family,
                    "case": name,
                    "num_tokens": prompt.num_tokens,
                    "reference_us": times["reference"] * 1e6,
                    "ours_us": times["ours"] * 1e6,
                    "floor_us": times["floor"] * 1e6,
                    "speedup": times["reference"] / times["ours"],
                    "vs_floor": times["ours"] / times["floor"],
                    "large": prompt.num_tokens >= LARGE_CASE_TOKENS,
                }
            )
    return {"rows": rows}
