"""Suite `prompt`, its input-forms parts: what the form of the inputs costs.

- `input_form_rows`: every argument of `prompt_positions`,
  `PromptLayout.from_ranges` and the tracker's `add_request` /
  `add_request_from_ranges`, one at a time, in each of FORMS, against the
  same call with canonical inputs (C-contiguous int64 arrays, float64 times).
- `seed_form_rows`: the seed PR's six cases with every argument in each
  form at once, against our call with canonical inputs and against the
  seed PR's design (`seed_design`) given the same form.

Every call's output is checked against `prompt_positions`' before it is timed.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from mrope_tracker import PositionTracker, PromptLayout, prompt_positions

from . import seed_design
from .timing import measure, medians_us, ratio
from .workloads import PromptBuilder, qwen2_5_omni, qwen2_5_vl


def same_result(name: str, got, expected) -> None:
    """Raise unless `got` is `expected`'s (positions, delta)."""
    positions, delta = got
    if isinstance(positions, torch.Tensor):
        positions = positions.numpy()
    if int(delta) != expected[1] or not np.array_equal(positions, expected[0]):
        raise AssertionError(f"{name}: positions differ from prompt_positions'")


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
        same_result(what, prompt_positions(config, **args), expected)
    elif call == "PromptLayout.from_ranges":
        layout = PromptLayout.from_ranges(config, num_tokens, **args)
        same_result(what, (layout.positions(), layout.delta), expected)
    else:
        args = dict(args)
        if call == "add_request":
            tracker.add_request("r", args.pop("token_ids"), **args)
        else:
            tracker.add_request_from_ranges("r", num_tokens, **args)
        positions = tracker.prepare(["r"], [num_tokens])
        same_result(what, (positions, tracker.mrope_position_delta("r")), expected)
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


def seed_form_rows(cases, config, rounds: int, target_s: float, progress=lambda message: None) -> list[dict]:
    """Per seed case and form (every argument in that form at once): our
    call's median ratio to our canonical call, and the seed design's time
    given the same form over ours (the speedup), each with its spread."""
    target_s = min(target_s, 0.005)  # calls of microseconds: rounds of a few milliseconds hold hundreds
    rows = []
    for k, (name, prompt) in enumerate(cases):
        progress(f"prompt seed cases by form: {name} ({k + 1}/{len(cases)})")
        canonical = _canonical({"token_ids": prompt.token_ids, **prompt.kwargs})
        expected = prompt_positions(config, **canonical)
        contenders = {}
        for form in ("canonical", *(key for key, _ in FORMS)):
            args = (
                canonical
                if form == "canonical"
                else {key: in_form(value, form, key in TIME_ARGS) for key, value in canonical.items()}
            )
            same_result(f"prompt_positions, {name}, {form}", prompt_positions(config, **args), expected)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                seed = seed_design.seed_prompt_positions(config, **args)
            same_result(f"seed design, {name}, {form}", seed, expected)
            contenders[form] = lambda args=args: prompt_positions(config, **args)
            contenders[f"seed {form}"] = lambda args=args: seed_design.seed_prompt_positions(config, **args)
        with warnings.catch_warnings():
            # numpy 2 warns on every np.asarray of a tensor (torch's __array__ takes no copy keyword)
            warnings.simplefilter("ignore", DeprecationWarning)
            samples = measure(contenders, rounds=rounds, target_s=target_s)
        forms = ("canonical", *(key for key, _ in FORMS))
        rows.append(
            {
                "case": name,
                "num_tokens": prompt.num_tokens,
                "canonical_us": medians_us(samples)["canonical"],
                "vs_canonical": {form: ratio(samples, form, "canonical") for form in forms},
                "speedup": {form: ratio(samples, f"seed {form}", form) for form in forms},
            }
        )
    return rows
