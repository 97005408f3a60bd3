"""Suite `sglang`: SGLang 0.5's position costs against `mrope_tracker.sglang`.

Three parts, run in the same process, torch on one thread:

- `rope_index`: SGLang's own ``get_rope_index`` (``mrope_rope_index.py``
  of the 0.5.23 wheel, loaded by path from MROPE_SGLANG_ROPE_INDEX; the
  sglang package is never imported; without the variable this part is
  skipped with a note) against our drop-in with the same tensor arguments, on
  the prompt suite's Qwen2.5-VL and Qwen3-VL workloads, long Qwen2.5-VL
  videos and Qwen3-Omni videos whose frame times are fractional (2/3 s a
  grid at 13 positions a second: SGLang's float32 rule carries the fraction,
  which our drop-in follows in one jitted pass). Outputs are compared before
  anything is timed (Qwen3-Omni: the positions as prefill casts them to int64;
  its delta is ours by design, docs/semantics.md defect 1).
- `batches`: the per-batch position cost of SGLang's extend, decode and
  speculative paths: its own ``ForwardBatch`` methods where the wheel's
  ``forward_batch_info.py`` lies beside the file MROPE_SGLANG_ROPE_INDEX
  names (bench/sglang_sources.py loads it by path), else re-stated from its code (``ForwardBatch.
  _compute_mrope_positions_extend``: slice each request's (3, L) tensor and
  concatenate; ``_compute_mrope_positions_decode``: its scan for stored
  positions that cover a request's sequence, a tensor index per request,
  then one ``.item()`` per request; ``compute_spec_mrope_positions``: stack
  one delta tensor per request; each with the tests its loop makes),
  against one `BatchPositions.positions` call, at several batch sizes;
  outputs compared first. The call is timed alone and as the
  installed plugin makes it, after its test of the batch for new requests
  (``RunnerState.serves``, on a batch with none).
- `memory`: per request, SGLang's (3, L) int64 positions (24 bytes a token)
  against our state (slot row and layout rows) and the bytes a processor
  sends (``PromptLayout.to_bytes``).
"""

from __future__ import annotations

import types

import attrs
import numpy as np
import torch

from mrope_tracker import MRopeConfig, PromptLayout
from mrope_tracker.sglang import BatchPositions, get_rope_index, mrope_positions_nbytes
from mrope_tracker.sglang.hooks import RunnerState

from .sglang_sources import ROPE_INDEX_ENV as ENV
from .sglang_sources import load_forward_batch, load_rope_index
from .timing import measure, medians_us, ratio, torch_threads
from .workloads import PromptBuilder, family_prompt_cases, qwen2_5_vl, qwen3_vl, seed_prompt_cases

SEMANTICS = "sglang-0.5"
BATCH_SIZES = (1, 8, 64, 256)
EXTEND_TOKENS = 64  # each request's chunk in an extend batch
DRAFT_TOKENS = 4


def _configs():
    return (
        ("Qwen2.5-VL", attrs.evolve(qwen2_5_vl(), semantics=SEMANTICS)),
        ("Qwen3-VL", attrs.evolve(qwen3_vl(), semantics=SEMANTICS)),
    )


def qwen3_omni() -> MRopeConfig:
    """Qwen3-Omni's published ids (13 positions a second) under the preset."""
    return MRopeConfig(family="qwen3_omni", model_type="qwen3_omni_moe", semantics=SEMANTICS)


def _omni_videos(config, quick: bool):
    """Fractional frame times (2/3 s a grid): the float32 rule's case."""
    cases = []
    for t in (30,) if quick else (30, 300):
        prompt = PromptBuilder(config).text(20).video(t, 18, 36, sp=2 / 3).text(20).build()
        cases.append((f"1 video of {t} frames at 2/3 s, {prompt.num_tokens:,} tokens", prompt))
    builder = PromptBuilder(config).text(20).video(8, 36, 36, sp=2 / 3).text(8)
    prompt = builder.video(8, 36, 36, sp=2 / 3).text(20).build()
    cases.append((f"2 videos of 8 frames at 2/3 s, {prompt.num_tokens:,} tokens", prompt))
    return cases


def _long_videos(config, quick: bool):
    frames = (30,) if quick else (30, 300, 900)
    cases = []
    for t in frames:
        prompt = PromptBuilder(config).text(20).video(t, 18, 36, sp=1.2).text(20).build()
        cases.append((f"1 video of {t} frames, {prompt.num_tokens:,} tokens", prompt))
    return cases


def workloads(quick: bool):
    (n25, c25), (n3, c3) = _configs()
    cases = [(n25, c25, name, p) for name, p in seed_prompt_cases(c25)]
    cases += [(n25, c25, name, p) for name, p in _long_videos(c25, quick)]
    cases += [(n3, c3, name, p) for name, p in family_prompt_cases(c3)]
    omni = qwen3_omni()
    cases += [("Qwen3-Omni", omni, name, p) for name, p in _omni_videos(omni, quick)]
    return cases


def sglang_args(config, prompt) -> dict:
    kw = prompt.kwargs
    times = kw.get("second_per_grid_ts") if config.spec.scaled_time else None
    extra = {}
    if config.family == "qwen3_omni":  # what SGLang's Qwen-VL processor passes for Qwen3-Omni
        lengths = kw.get("audio_feature_lengths")
        extra = dict(
            audio_token_id=config.audio_token_id,
            audio_start_token_id=config.audio_start_token_id,
            position_id_per_seconds=config.tokens_per_second,
            use_audio_in_video=bool(kw.get("use_audio_in_video", False)),
            audio_seqlens=None if lengths is None else torch.from_numpy(lengths),
        )
    return dict(
        spatial_merge_size=config.spatial_merge_size,
        image_token_id=config.image_token_id,
        video_token_id=config.video_token_id,
        vision_start_token_id=config.vision_start_token_id,
        model_type=config.model_type,
        tokens_per_second=config.tokens_per_second,
        input_ids=torch.from_numpy(prompt.token_ids)[None],
        image_grid_thw=torch.from_numpy(kw["image_grid_thw"]) if "image_grid_thw" in kw else None,
        video_grid_thw=torch.from_numpy(kw["video_grid_thw"]) if "video_grid_thw" in kw else None,
        second_per_grid_ts=None if times is None else torch.from_numpy(times),
        **extra,
    )


def _same(config, theirs, ours) -> bool:
    if config.family == "qwen3_omni":  # float32 positions; prefill casts them to int64 (the delta: defect 1)
        return torch.equal(theirs[0].to(torch.int64), ours[0].to(torch.int64))
    return torch.equal(theirs[0], ours[0]) and torch.equal(theirs[1], ours[1])


def rope_index_rows(quick: bool, progress, sglang) -> list[dict]:
    rows = []
    for family, config, name, prompt in workloads(quick):
        args = sglang_args(config, prompt)
        theirs, ours = sglang.get_rope_index(**args), get_rope_index(**args, semantics=SEMANTICS)
        if not _same(config, theirs, ours):
            raise AssertionError(f"sglang: {family} {name}: our drop-in and SGLang's get_rope_index disagree")
        progress(f"sglang: get_rope_index, {family} {name}")
        samples = measure(
            {
                "sglang": lambda args=args: sglang.get_rope_index(**args),
                "ours": lambda args=args: get_rope_index(**args, semantics=SEMANTICS),
            },
            rounds=3 if quick else 9,
            target_s=0.005 if quick else 0.02,
        )
        us = medians_us(samples)
        rows.append(
            {
                "family": family,
                "case": name,
                "tokens": prompt.num_tokens,
                "sglang_us": us["sglang"],
                "ours_us": us["ours"],
                "speedup": ratio(samples, "sglang", "ours"),
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------- batches
def _sglang_extend(stored, prefix_lens, extend_lens, reqs):
    """SGLang's extend path, re-stated: each request's slice of its stored positions (with its two tests: a
    session's text past the saved positions, an empty slice), concatenated."""
    parts = [None] * len(stored)
    for b in range(len(stored)):
        part = stored[b][0][:, prefix_lens[b] : prefix_lens[b] + extend_lens[b]]
        if reqs[b].session is not None and part.shape[1] < extend_lens[b]:
            raise AssertionError("sglang: the bench's requests have no session")
        elif part.numel() == 0:
            raise AssertionError("sglang: the bench's chunks are never empty")
        parts[b] = part
    return torch.cat(parts, dim=1).to(dtype=torch.int64, device="cpu", non_blocking=True)


def _sglang_decode(stored, seq_lens):
    """SGLang's decode path, re-stated: its two scans of the batch (does a request store positions past its
    sequence? is any request multimodal?), one .item() per request, then one add."""
    precomputed = any(mm is not None and mm[0].shape[1] >= seq_lens[b] for b, mm in enumerate(stored))
    if precomputed or not any(mm is not None for mm in stored):
        raise AssertionError("sglang: the bench's decode batch takes SGLang's delta path")
    deltas = [0] * len(stored)
    for b in range(len(stored)):
        deltas[b] = stored[b][1].item()
    deltas = torch.tensor(deltas, dtype=torch.int64, device="cpu")
    return ((deltas - 1) + seq_lens.to(torch.int64)).unsqueeze(0).repeat(3, 1)


def _sglang_spec(stored, spec_positions):
    """SGLang's speculative path, re-stated: its scan for a text-only batch, then one delta tensor per
    request, stacked."""
    bs = len(stored)
    if all(mm is None for mm in stored):
        raise AssertionError("sglang: the bench's speculative batch is multimodal")
    deltas = torch.stack([stored[b][1].squeeze(0) for b in range(bs)], dim=0)
    return (spec_positions.view(bs, -1) + deltas).flatten().unsqueeze(0).repeat(3, 1)


def batch_rows(quick: bool, progress, forward=None) -> list[dict]:
    """The batch table; SGLang's side is its own ForwardBatch methods where `forward` (forward_batch_info.py)
    is loaded, else the re-statements above."""
    config = _configs()[0][1]
    prompt = PromptBuilder(config).text(20).image(36, 36).text(20).build()
    layout = PromptLayout.from_ranges(config, prompt.num_tokens, **prompt.kwargs, **prompt.ranges)
    positions = torch.from_numpy(layout.positions())
    delta = torch.tensor([[layout.delta]])
    rows = []
    for bs in BATCH_SIZES[:3] if quick else BATCH_SIZES:
        engine = BatchPositions(config, max_num_reqs=bs, max_num_tokens=bs * EXTEND_TOKENS)
        for row in range(1, bs + 1):
            engine.admit(row, layout.to_bytes())
        plugin, live, rows_cpu = _admitted(engine, bs)
        stored = [(positions.clone(), delta.clone()) for _ in range(bs)]
        reqs = [types.SimpleNamespace(session=None) for _ in range(bs)]
        pool_rows = np.arange(1, bs + 1)
        prefix = [10 + (b * 7) % 200 for b in range(bs)]  # chunks that start in text and inside the image
        extend = [EXTEND_TOKENS] * bs
        seq = torch.tensor([prompt.num_tokens + 1 + b % 50 for b in range(bs)])
        spec = (seq[:, None] - 1 + torch.arange(DRAFT_TOKENS)).flatten()
        theirs_of = _their_calls(forward, stored, prefix, extend, seq, spec, reqs)
        cases = {
            "extend": lambda: engine.positions(pool_rows, prefix_lens=prefix, extend_lens=extend),
            "decode": lambda: engine.positions(pool_rows, seq_lens=seq),
            "speculative": lambda: engine.positions(torch.from_numpy(pool_rows), spec_positions=spec),
        }
        for mode, ours in cases.items():
            theirs = theirs_of[mode]
            if not torch.equal(theirs(), ours()):
                raise AssertionError(f"sglang: the {mode} batch of {bs} differs from SGLang's path")
            progress(f"sglang: {mode} batch of {bs}")

            def served(ours=ours):  # the plugin's way: its test for new requests, then the call
                if plugin.serves(rows_cpu, live, None) is None:
                    raise AssertionError("sglang: the plugin's state does not serve the bench's batch")
                return ours()

            calls = {"sglang": theirs, "ours": ours, "served": served}
            samples = measure(calls, rounds=3 if quick else 9, target_s=0.005)
            us = medians_us(samples)
            rows.append(
                {
                    "mode": mode,
                    "batch_size": bs,
                    "tokens": int(ours().shape[1]),
                    "sglang_us": us["sglang"],
                    "ours_us": us["ours"],
                    "speedup": ratio(samples, "sglang", "ours"),
                    "served_us": us["served"],
                    "served_speedup": ratio(samples, "sglang", "served"),
                }
            )
    return rows


def _their_calls(forward, stored, prefix, extend, seq, spec, reqs) -> dict:
    """SGLang's position call for each batch mode: its own `ForwardBatch` methods where `forward` is loaded,
    run on a batch as its scheduler fills one (each request's (3, L) table and delta), else the
    re-statements."""
    if forward is None:
        return {
            "extend": lambda: _sglang_extend(stored, prefix, extend, reqs),
            "decode": lambda: _sglang_decode(stored, seq),
            "speculative": lambda: _sglang_spec(stored, spec),
        }
    inputs = [
        types.SimpleNamespace(mrope_positions=p, mrope_position_delta=d, mrope_position_delta_repeated_cache=None)
        for p, d in stored
    ]
    batch = types.SimpleNamespace(multimodal_inputs=inputs, reqs=reqs, prefix_lens=prefix, extend_lens=extend,
                                  spec_info=types.SimpleNamespace(positions=spec))  # fmt: skip
    runner = types.SimpleNamespace(device=torch.device("cpu"))

    def method(name: str, mode: str, seq_lens: torch.Tensor):
        state = object.__new__(forward.ForwardBatch)  # (the fields its position methods do not read stay unset)
        state.forward_mode = getattr(forward.ForwardMode, mode)
        state.seq_lens_cpu = state.seq_lens = seq_lens
        unbound = getattr(forward.ForwardBatch, name)

        def call():
            unbound(state, runner, batch)
            return state.mrope_positions

        return call

    extended = torch.tensor([p + e for p, e in zip(prefix, extend)])
    return {
        "extend": method("_compute_mrope_positions", "EXTEND", extended),
        "decode": method("_compute_mrope_positions", "DECODE", seq),
        "speculative": method("compute_spec_mrope_positions", "DECODE", seq),
    }


def _admitted(engine: BatchPositions, bs: int):
    """The installed plugin's per-runner state holding `engine`, with rows 1..bs admitted at generation 1:
    (state, SGLang's req_generation, the batch's req_pool_indices_cpu)."""
    state = RunnerState(bs, bs * EXTEND_TOKENS, torch.device("cpu"))
    state.engine = engine
    state.generation[1:] = 1
    live = torch.ones(bs + 1, dtype=torch.int64)
    return state, live, torch.arange(1, bs + 1)


def memory_rows(quick: bool) -> list[dict]:
    rows = []
    for family, config, name, prompt in workloads(quick):
        layout = PromptLayout.from_tokens(config, prompt.token_ids, **prompt.kwargs)
        engine = BatchPositions(config, max_num_reqs=1, max_num_tokens=8)
        engine.admit(1, layout)
        rows.append(
            {
                "family": family,
                "case": name,
                "tokens": prompt.num_tokens,
                "sglang_bytes": mrope_positions_nbytes(prompt.num_tokens),
                "ours_bytes": engine.layout_nbytes(1),
                "wire_bytes": len(layout.to_bytes()),
                "layout_rows": layout.num_rows,
            }
        )
    return rows


def run(quick: bool, progress) -> dict:
    with torch_threads(1):
        sglang = load_rope_index()
        result: dict = {}
        if sglang is None:
            result["rope_index_note"] = f"skipped: set {ENV} to SGLang 0.5.23's mrope_rope_index.py to compare"
            result["rope_index"] = []
        else:
            result["rope_index"] = rope_index_rows(quick, progress, sglang)
        forward = load_forward_batch()
        result["batches_sglang"] = "re-stated" if forward is None else "its code"
        result["batches"] = batch_rows(quick, progress, forward)
        result["memory"] = memory_rows(quick)
    return result


def tables(result: dict) -> str:
    from .report import paragraph, table

    def us(x: float) -> str:
        return f"{x:,.1f} us" if x < 1000 else f"{x / 1000:,.2f} ms"

    def x(r: dict) -> str:
        return f"{r['median']:,.1f}x ({r['min']:,.1f}-{r['max']:,.1f})"

    parts = []
    if result.get("rope_index_note"):
        parts.append(paragraph(f"get_rope_index: {result['rope_index_note']}."))
    if result["rope_index"]:
        rows = [
            [r["family"], r["case"], f"{r['tokens']:,}", us(r["sglang_us"]), us(r["ours_us"]), x(r["speedup"])]
            for r in result["rope_index"]
        ]
        parts.append(table(["family", "prompt", "tokens", "SGLang get_rope_index", "ours", "speedup"], rows))
    rows = [
        [r["mode"], f"{r['batch_size']}", f"{r['tokens']:,}", us(r["sglang_us"]), us(r["ours_us"]), x(r["speedup"]),
         us(r["served_us"]), x(r["served_speedup"])]
        for r in result["batches"]
    ]  # fmt: skip
    header = ["batch", "requests", "tokens", f"SGLang ({result.get('batches_sglang', 're-stated')})", "one call",
              "speedup", "as the plugin calls it", "speedup"]  # fmt: skip
    parts.append(table(header, rows))
    rows = [
        [r["family"], r["case"], f"{r['sglang_bytes']:,} B", f"{r['ours_bytes']:,} B ({r['layout_rows']} rows)",
         f"{r['wire_bytes']:,} B"]
        for r in result["memory"]
    ]  # fmt: skip
    parts.append(table(["family", "prompt", "SGLang (3, L) int64", "our state", "sent by the processor"], rows))
    return "\n\n".join(parts)
