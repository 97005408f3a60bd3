"""Suite `admission`: what admitting a request costs.

By cached-prefix length: a request whose prompt is one long video followed
by 512 uncached text tokens, with the video (and the text before it) in the
prefix cache: 1K and 32K cached tokens, the same single multimodal item.
Designs:
- the tracker from placeholder ranges: O(items), whatever the length;
- the tracker from token ids: one scan of the tokens, no positions written;
- today's V1 design: the whole prompt's positions, cached part included;
- an MRV2-like table: the same, written into the slot's table rows.
Each timed call admits and then removes the request. Both prefix lengths
run in the same interleaved rounds, so the growth from 1K to 32K is a ratio
per round, reported as its median, min and max.

From vLLM's inputs: a long Qwen3-VL video (a 192 x 40 x 40 grid: 192 frame
blocks of 400 tokens, each after 8 timestamp tokens; 78,760 tokens), given
as vLLM's runners get it: the prompt ids as a Python list (vLLM 0.34: an
int32 `TokenBuffer`, only counted here too) and one
`MultiModalFeatureSpec`-like feature whose `is_embed` tensor marks the
frames (one run per frame). Timed, against `prompt_positions` writing the
same prompt's positions from an int64 array (ratios per round):
- the tracker's `add_request_from_features`: the layout built from the
  feature and its rows written into the tracker's pool (then removed);
- `layout_from_features` alone;
- the MRV2-like table's admission: the model's `get_mrope_input_positions`
  (this library's, faster than vLLM's numpy) and the table write;
- the same positions by a token scan of the id list (the list converted to
  an array first): the other way such a table could be filled.
"""

from __future__ import annotations

import numpy as np
import torch

from mrope_tracker import PositionTracker, prompt_positions
from mrope_tracker.vllm import get_mrope_input_positions, layout_from_features

from .timing import measure, medians_us, ratio
from .workloads import PromptBuilder, qwen2_5_vl, qwen3_vl

UNCACHED = 512
DESIGNS = ("tracker (ranges)", "tracker (tokens)", "V1 design", "MRV2-like")
# the long-video case: its contenders, and the one every ratio divides by
FEATURE_DESIGNS = (
    "tracker: add_request_from_features",
    "layout_from_features",
    "MRV2-like: positions from features + table",
    "MRV2-like: token scan of the list + table",
)
WRITE_POSITIONS = "prompt_positions (int64 array)"


def _prompt(config, cached_tokens: int):
    """Text + one video of about `cached_tokens` tokens (162 per frame) + 512 text tokens."""
    frames = max(1, (cached_tokens - 18) // 162)
    prompt = PromptBuilder(config).text(16).video(frames, 18, 36).text(UNCACHED).build()
    return prompt, prompt.num_tokens - UNCACHED


def long_qwen3_vl_video():
    """20 text tokens, a 192 x 40 x 40 Qwen3-VL video with 8 timestamp tokens a frame, 20 text tokens."""
    return PromptBuilder(qwen3_vl(), timestamp_tokens=8).text(20).video(192, 40, 40).text(20).build()


def _by_cached_prefix(quick: bool, progress) -> dict:
    config = qwen2_5_vl()
    max_model_len = 40960
    tracker = PositionTracker(config, max_num_reqs=4, max_num_batched_tokens=8192, max_model_len=max_model_len)
    table = np.zeros((4 * 3, max_model_len), np.int32)  # the MRV2-like design's per-slot rows
    contenders = {}
    rows = []
    for cached in (1024, 32768):
        prompt, hit = _prompt(config, cached)
        ids, kwargs, ranges = prompt.token_ids, prompt.kwargs, prompt.ranges

        def from_ranges(prompt=prompt, kwargs=kwargs, ranges=ranges, hit=hit):
            tracker.add_request_from_ranges("r", prompt.num_tokens, **kwargs, **ranges, num_computed_tokens=hit)
            tracker.remove_request("r")

        def from_tokens(ids=ids, kwargs=kwargs, hit=hit):
            tracker.add_request("r", ids, **kwargs, num_computed_tokens=hit)
            tracker.remove_request("r")

        def v1(ids=ids, kwargs=kwargs):
            positions, delta = prompt_positions(config, ids, **kwargs)
            return positions, delta

        def mrv2(ids=ids, kwargs=kwargs):
            positions, delta = prompt_positions(config, ids, **kwargs)
            table[0:3, : positions.shape[1]] = positions
            return delta

        # every design must agree on the request's delta before it is timed
        tracker.add_request_from_ranges("check", prompt.num_tokens, **kwargs, **ranges)
        tracker.add_request("check2", ids, **kwargs)
        deltas = {tracker.mrope_position_delta("check"), tracker.mrope_position_delta("check2"), v1()[1], mrv2()}
        tracker.remove_request("check")
        tracker.remove_request("check2")
        if len(deltas) != 1:
            raise AssertionError(f"admission designs disagree on delta: {deltas}")
        for name, fn in zip(DESIGNS, (from_ranges, from_tokens, v1, mrv2)):
            contenders[(name, cached)] = fn
        rows.append({"cached_tokens": hit, "prompt_tokens": prompt.num_tokens, "key": cached})
    progress("admission: 1K and 32K cached prefixes, interleaved")
    samples = measure({f"{name}@{cached}": fn for (name, cached), fn in contenders.items()}, rounds=5 if quick else 15)
    us = medians_us(samples)
    for row in rows:
        key = row.pop("key")
        row.update({name: us[f"{name}@{key}"] for name in DESIGNS})
    growth = {name: ratio(samples, f"{name}@32768", f"{name}@1024") for name in DESIGNS}
    return {"rows": rows, "growth_32k_over_1k": growth}


def _from_features(quick: bool, progress) -> dict:
    prompt = long_qwen3_vl_video()
    config = qwen3_vl()
    ids, id_list, features, kwargs = prompt.token_ids, prompt.token_list, prompt.features, prompt.kwargs
    num_tokens = prompt.num_tokens
    tracker = PositionTracker(config, max_num_reqs=4, max_num_batched_tokens=num_tokens, max_model_len=131072)
    table = np.zeros((4 * 3, 131072), np.int32)  # the MRV2-like design's per-slot rows

    def write_positions():
        return prompt_positions(config, ids, **kwargs)

    def tracker_admit():
        tracker.add_request_from_features("r", id_list, features)
        tracker.remove_request("r")

    def layout():
        return layout_from_features(config, len(id_list), features)

    def mrv2_features():
        positions, delta = get_mrope_input_positions(config, id_list, features)
        table[0:3, :num_tokens] = positions.numpy()
        return delta

    def mrv2_scan():
        grids = {name: elem.data.numpy()[None] for f in features for name, elem in f.data.items() if "grid" in name}
        positions, delta = prompt_positions(config, np.array(id_list, np.int64), **grids)
        table[0:3, :num_tokens] = positions
        return delta

    # every contender must agree on the delta (and the tracker's rows on the positions) before it is timed
    expected, delta = write_positions()
    tracker.add_request_from_features("check", id_list, features)
    got = tracker.prepare(["check"], [num_tokens]).numpy()
    deltas = {delta, tracker.mrope_position_delta("check"), layout().delta, mrv2_features(), mrv2_scan()}
    tracker.remove_request("check")
    if len(deltas) != 1 or not np.array_equal(got, expected):
        raise AssertionError(f"admission from features: the designs disagree (deltas {deltas})")
    contenders = dict(zip(FEATURE_DESIGNS, (tracker_admit, layout, mrv2_features, mrv2_scan)))
    contenders[WRITE_POSITIONS] = write_positions
    progress(f"admission: a {num_tokens:,}-token Qwen3-VL video from vLLM's features")
    samples = measure(contenders, rounds=7 if quick else 21)
    us = medians_us(samples)
    versus = {name: ratio(samples, name, WRITE_POSITIONS) for name in FEATURE_DESIGNS}
    rope = _rope_admission(config, prompt, write_positions, 7 if quick else 21, progress)
    if rope is not None:
        us[ROPE_ADMIT], versus[ROPE_ADMIT] = rope
    return {
        "case": "Qwen3-VL, 192 x 40 x 40 video with timestamps",
        "prompt_tokens": num_tokens,
        "frames": int(prompt.kwargs["video_grid_thw"][0, 0]),
        "us": us,
        "vs_prompt_positions": versus,
    }


ROPE_ADMIT = "RopeState: init_prefill_positions, staged"
ROPE_BATCH = 32  # admissions timed between two applies (the first after an apply finds the caches cold)


def _rope_admission(config, prompt, write_positions, rounds: int, progress):
    """(median us, ratio to prompt_positions) of `RopeState.init_prefill_positions`
    (Model Runner V2's admission: the layout from vLLM's features, its device
    rows, staged in the pinned buffer), or None without triton. Each round
    admits ROPE_BATCH requests, timed one by one, and times as many
    `prompt_positions` calls, the two taking turns to go first, then moves
    the admissions to the device untimed (the step's `apply_staged_writes`:
    on a CPU, triton's interpreter); the ratio is paired round by round. The pool has room for every admission, so no
    compaction (a device gather of the live rows) falls in a timed call."""
    import os
    import sys
    import time

    if not torch.cuda.is_available():
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            return None  # triton came in compiled mode, with no GPU to run on (the CLI sets the interpreter first)
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported
    try:
        from mrope_tracker.device.rope_state import RopeState

        device = "cuda" if torch.cuda.is_available() else "cpu"
        state = RopeState(
            # room for every timed admission: a compaction (a device gather when the pool's top runs out)
            # is not admission, and on a CPU it runs in triton's interpreter
            3,
            ROPE_BATCH + 1,
            8192,
            131072,
            device,
            config=config,
            max_num_rows=(ROPE_BATCH + 1) * 400 * (rounds + 2),
            staging_bytes=ROPE_BATCH * 20 * 1024,  # a round's admissions fit one buffer, reused round after round
        )
    except ImportError:
        return None
    id_list, features = prompt.token_list, prompt.features
    state.init_prefill_positions(0, config, id_list, features)  # every kernel loaded before timing
    state.apply_staged_writes()
    got = state.read_prefill_positions(0, prompt.num_tokens).cpu().numpy()
    if not np.array_equal(got, write_positions()[0]):
        raise AssertionError("admission from features: RopeState's rows disagree with prompt_positions")
    progress("admission: RopeState.init_prefill_positions, the same video")
    admit_times, write_times = [], []

    def admit_batch():
        spent = 0.0
        for slot in range(ROPE_BATCH):
            start = time.perf_counter()
            state.init_prefill_positions(slot, config, id_list, features)
            spent += time.perf_counter() - start
        admit_times.append(spent / ROPE_BATCH)

    def write_batch():
        start = time.perf_counter()
        for _ in range(ROPE_BATCH):
            write_positions()
        write_times.append((time.perf_counter() - start) / ROPE_BATCH)

    for k in range(rounds):
        # after the untimed apply (on a CPU, triton's interpreter: its run leaves the caches cold, which a
        # GPU's copy and launch would not), one untimed call of each, then the two take turns to go first
        state.init_prefill_positions(ROPE_BATCH, config, id_list, features)
        write_positions()
        for batch in (admit_batch, write_batch) if k % 2 == 0 else (write_batch, admit_batch):
            batch()
        state.apply_staged_writes()
    samples = {ROPE_ADMIT: admit_times, WRITE_POSITIONS: write_times}
    return medians_us(samples)[ROPE_ADMIT], ratio(samples, ROPE_ADMIT, WRITE_POSITIONS)


def run(quick: bool, progress) -> dict:
    out = _by_cached_prefix(quick, progress)
    out["from_features"] = _from_features(quick, progress)
    return out
