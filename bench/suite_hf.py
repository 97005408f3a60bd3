"""Suite `hf`: `mrope_tracker.hf.get_rope_index` against the installed
transformers' own ``get_rope_index``, in the same process.

Per family, a left-padded batch of 8 prompts from the `compare` sample
(`mrope_tracker.hf.sample.sample_prompts`: a system prompt, images, videos at common frame
rates, audio clips; text between), as a training step hands them to the
model: (8, L) int64 ids, an attention mask, the batch's grids concatenated.
The Omni families get two batches, one without and one with audio inside
the videos. PaddleOCR-VL, ERNIE-4.5-VL, GLM-OCR and Cohere Compass join
under transformers 5.x, which has them (4.57 does not). transformers runs its method unbound on a stand-in that holds
its real config class (`mrope_tracker.hf.native`), so no weight is loaded;
its tensors are built once, outside the timed call. Ours is called with a
ready `MRopeConfig`, as `hf.patch` calls it. Both outputs are checked equal
(values, dtypes, shapes) before anything is timed; torch runs on one thread,
as our kernel does. Ratios: transformers' time over ours, median (min-max)
over interleaved rounds. Target: >= 50x.

Without transformers the suite records a note and measures nothing.
"""

from __future__ import annotations

import numpy as np
import torch

from mrope_tracker import MRopeConfig, hf
from mrope_tracker.hf import native as hf_native
from mrope_tracker.hf import sample as hf_sample

from .timing import measure, medians_us, ratio, torch_threads

BATCH = 8
TARGET = 50.0
PAD_ID = 0

# (label, MRopeConfig with the published values)
FAMILIES = (
    ("qwen2_vl", MRopeConfig(family="qwen2_vl")),
    ("qwen2_5_vl", MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)),
    ("qwen2_5_omni", MRopeConfig(family="qwen2_5_omni", tokens_per_second=25, seconds_per_chunk=2)),
    ("qwen3_vl", MRopeConfig(family="qwen3_vl")),
    ("glm4v", MRopeConfig(family="glm4v")),
    ("qwen3_omni", MRopeConfig(family="qwen3_omni", model_type="qwen3_omni_moe", tokens_per_second=13, n_window=50)),
    # transformers 5.x only (a line without the family leaves it out)
    ("paddleocr_vl", MRopeConfig(family="paddleocr_vl")),
    ("ernie4_5_vl_moe", MRopeConfig(family="ernie4_5_moe_vl", model_type="ernie4_5_vl_moe")),
    ("glm_ocr", MRopeConfig(family="glm_ocr")),
    ("cohere_compass", MRopeConfig(family="cohere_compass")),
    # four position axes (transformers 5.24 and later)
    ("hunyuan_vl", MRopeConfig(family="hunyuan_vl")),
)


def batch_of(config: MRopeConfig, audio_in_video: bool, seed: int = 0) -> dict:
    """BATCH sample prompts of one kind, left-padded: the keyword arguments of get_rope_index."""
    prompts, k = [], 0
    while len(prompts) < BATCH:
        for p in hf_sample.sample_prompts(config, 4 * BATCH, seed + k):
            if p.use_audio_in_video == audio_in_video and (not audio_in_video or p.video_grid_thw is not None):
                prompts.append(p)
        k += 1
    prompts = prompts[:BATCH]
    width = max(p.token_ids.shape[0] for p in prompts)
    ids = np.full((BATCH, width), PAD_ID, np.int64)
    mask = np.zeros((BATCH, width), np.int64)
    for b, p in enumerate(prompts):
        n = p.token_ids.shape[0]
        ids[b, width - n :] = p.token_ids
        mask[b, width - n :] = 1

    def cat(name, dtype, width_=None):
        parts = [getattr(p, name) for p in prompts if getattr(p, name) is not None]
        if not parts:
            return None
        out = np.concatenate(parts).astype(dtype)
        return torch.from_numpy(out.reshape(-1, width_) if width_ else out)

    kwargs = dict(
        input_ids=torch.from_numpy(ids),
        attention_mask=torch.from_numpy(mask),
        image_grid_thw=cat("image_grid_thw", np.int64, 3),
        video_grid_thw=cat("video_grid_thw", np.int64, 3),
        second_per_grid_ts=cat("second_per_grid_ts", np.float32),
        audio_feature_lengths=cat("audio_feature_lengths", np.int64),
        use_audio_in_video=audio_in_video,
    )
    if not config.spec.scaled_time:
        kwargs["second_per_grid_ts"] = None
    return kwargs


def _same(ours, theirs, label: str) -> None:
    for got, want in zip(ours, theirs):
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            raise AssertionError(f"hf suite, {label}: our get_rope_index differs from transformers'")


def run(quick: bool, progress) -> dict:
    if not hf_native.available():
        progress("hf: transformers is not installed; skipped")
        return {"skipped": "transformers is not installed", "rows": []}
    version = hf.installed_transformers()
    semantics = hf.default_semantics()
    rounds = 5 if quick else 15
    rows = []
    installed = set(hf_native.supported_model_types())
    for label, base in FAMILIES:
        if not set(base.spec.transformers_classes) & installed:
            continue
        config = MRopeConfig.from_hf_config(base, semantics=semantics)
        for audio_in_video in (False, True) if config.is_omni else (False,):
            name = f"{label}, audio in video" if audio_in_video else label
            progress(f"hf: {name} (transformers {version}, batch {BATCH})")
            kwargs = batch_of(config, audio_in_video)
            ids = kwargs.pop("input_ids")
            theirs_call = hf_native.prepare(config, ids, **kwargs)
            ours_call = lambda ids=ids, kwargs=kwargs, config=config: hf.get_rope_index(config, ids, **kwargs)  # noqa: E731
            _same(ours_call(), theirs_call(), name)
            with torch_threads(1):
                samples = measure({"ours": ours_call, "transformers": theirs_call}, rounds=rounds)
            us = medians_us(samples)
            speedup = ratio(samples, "transformers", "ours")
            rows.append(
                {
                    "family": name,
                    "batch": BATCH,
                    "width": int(ids.shape[1]),
                    "tokens": int(kwargs["attention_mask"].sum()),
                    "items": sum(
                        0 if kwargs[k] is None else int(kwargs[k].shape[0])
                        for k in ("image_grid_thw", "video_grid_thw", "audio_feature_lengths")
                    ),
                    "ours_us": us["ours"],
                    "transformers_us": us["transformers"],
                    "speedup": speedup,
                    "target_met": speedup["median"] >= TARGET,
                }
            )
    return {"transformers": version, "semantics": semantics, "target": TARGET, "rows": rows}


def tables(result: dict) -> str:
    """The suite's Markdown table (for `bench.report`)."""
    from .report import paragraph, table

    if result.get("skipped"):
        return f"Skipped: {result['skipped']}."
    head = paragraph(
        f"**`hf.get_rope_index` vs transformers {result['transformers']}'s own `get_rope_index`** "
        f"(preset {result['semantics']}), left-padded batches of {BATCH} sample prompts (batch: rows x width; "
        "tokens: those the attention mask keeps); equal outputs checked first. Speedup: transformers' time / ours, "
        f"median (min–max) over rounds. Target >= {result['target']:.0f}x."
    )
    rows = []
    for r in result["rows"]:
        s = r["speedup"]
        rows.append(
            [
                r["family"],
                f"{r['batch']} x {r['width']:,}",
                f"{r['tokens']:,}",
                str(r["items"]),
                _us(r["ours_us"]),
                _us(r["transformers_us"]),
                f"{s['median']:,.0f}x ({s['min']:,.0f}–{s['max']:,.0f})",
                "met" if r["target_met"] else "missed",
            ]
        )
    return (
        head + "\n\n" + table(["family", "batch", "tokens", "items", "ours", "transformers", "speedup", "target"], rows)
    )


def _us(x: float) -> str:
    return f"{x:,.1f} us" if x < 1000 else f"{x / 1000:,.2f} ms"
