"""Shared hypothesis strategies: random model configs and random prompts.

A `Prompt` is built from a random list of segments (text runs and items) and
carries everything each entry point needs: token ids and grids for the
token-scan form, and per-item (offset, length) ranges for the range form.

Omni audio-in-video blocks are laid out with a literal, token-by-token copy
of transformers' chunk walker, independent of both the kernels
and the reference.
"""

from __future__ import annotations

import attrs
import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from mrope_tracker import MRopeConfig

# Frame rates that expose float32 rounding of tau and ones that leave chunks empty (fps < 1), as second_per_grid_ts
# = temporal_patch_size / fps with temporal_patch_size 2.
FPS_VALUES = (0.1, 0.3, 0.5, 0.6, 0.7, 1.0, 1.2, 1.3, 2.0, 2.3, 2.4, 2.6, 2.7, 3.0, 3.1, 4.0, 4.8, 6.0, 12.0)
TEXT_IDS = np.arange(100, 140)


def examples(ci_count: int, minimum: int = 1) -> int:
    """A test's own example count, scaled by the active hypothesis profile
    (tests/conftest.py): `ci_count` under "ci", the same fraction of the
    profile's count under the others ("dev" two fifteenths, "stress" more), at least `minimum`."""
    return max(minimum, ci_count * settings.default.max_examples // settings.get_profile("ci").max_examples)


@st.composite
def configs(draw, families=("qwen2_vl", "qwen2_5_vl", "qwen2_5_omni")) -> MRopeConfig:
    """Published configs and small toy ones (merge 1, small Omni chunks) that
    reach chunk boundaries with small grids."""
    family = draw(st.sampled_from(families))
    merge = draw(st.sampled_from((1, 2)))
    if family == "qwen2_vl":
        return MRopeConfig(family=family, spatial_merge_size=merge)
    if family == "qwen2_5_vl":
        return MRopeConfig(
            family=family, spatial_merge_size=merge, tokens_per_second=draw(st.sampled_from((1, 2, 4, 1.5)))
        )
    pps = draw(st.sampled_from((2, 3, 25, 13, 2.5)))
    spc = draw(st.sampled_from((1, 2, 0.5)))
    if int(pps * spc) < 1:
        spc = 2
    return MRopeConfig(family=family, spatial_merge_size=merge, tokens_per_second=pps, seconds_per_chunk=spc)


def audio_tokens(frames: int) -> int:
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


def tau_values(t: int, sp: np.float32, r: float) -> np.ndarray:
    """float32 (f * sp) * r, truncated: the reference's temporal index."""
    f = np.arange(t, dtype=np.float32)
    return ((f * np.float32(sp)).astype(np.float32) * np.float32(r)).astype(np.float32).astype(np.int64)


def hf_chunks(values, size: int) -> list[tuple[int, int]]:
    """transformers' get_chunked_index walker, token by token."""
    chunks, start, c = [], 0, 1
    for i, v in enumerate(values):
        if v >= c * size:
            chunks.append((start, i))
            start = i
            c += 1
    chunks.append((start, len(values)))
    return chunks


def interleave_kinds(frame_times, hw: int, num_audio: int, size: int) -> list[str]:
    """Token kinds ('V' or 'A') of an audio-in-video interleave, in order, with
    frames cut on `frame_times` (the model's tau, or the processor's float times)."""
    video = hf_chunks(np.repeat(frame_times, hw), size)
    audio = hf_chunks(np.arange(num_audio), size)
    kinds: list[str] = []
    for j in range(max(len(video), len(audio))):
        if j < len(video):
            kinds += ["V"] * (video[j][1] - video[j][0])
        if j < len(audio):
            kinds += ["A"] * (audio[j][1] - audio[j][0])
    return kinds


@attrs.frozen(eq=False)
class Prompt:
    config: MRopeConfig
    token_ids: np.ndarray
    image_grid_thw: np.ndarray  # (n, 3)
    video_grid_thw: np.ndarray  # (n, 3)
    second_per_grid_ts: np.ndarray | None  # float32, one per video
    audio_feature_lengths: np.ndarray | None  # prompt order: clips and video tracks
    use_audio_in_video: bool
    image_ranges: np.ndarray  # (n, 2) offset, length
    video_ranges: np.ndarray
    audio_ranges: np.ndarray

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    def kwargs(self) -> dict:
        """Keyword arguments of prompt_positions / add_request (beside config and tokens)."""
        kw = {}
        if len(self.image_grid_thw):
            kw["image_grid_thw"] = self.image_grid_thw
        if len(self.video_grid_thw):
            kw["video_grid_thw"] = self.video_grid_thw
        if self.second_per_grid_ts is not None:
            kw["second_per_grid_ts"] = self.second_per_grid_ts
        if self.audio_feature_lengths is not None:
            kw["audio_feature_lengths"] = self.audio_feature_lengths
        if self.use_audio_in_video:
            kw["use_audio_in_video"] = True
        return kw

    def range_kwargs(self) -> dict:
        """Keyword arguments of PromptLayout.from_ranges / add_request_from_ranges."""
        kw = self.kwargs()
        kw.update(image_ranges=self.image_ranges, video_ranges=self.video_ranges, audio_ranges=self.audio_ranges)
        if self.use_audio_in_video:
            kw["interleave"] = "model"  # laid out by the model's own chunking (below)
        return kw


_segment_kinds = st.sampled_from(("text", "text", "image", "video", "audio"))


@st.composite
def prompts(draw, config=None, max_items: int = 5, max_text: int = 12, use_audio_in_video=None) -> Prompt:
    """A random valid prompt: text runs of 0..max_text tokens around up to
    max_items items (images, videos, Omni audio and audio-in-video blocks),
    adjacent or wrapped in vision_start/vision_end, at the start or end."""
    if config is None:
        config = draw(configs())
    omni = config.is_omni
    av = omni and (draw(st.booleans()) if use_audio_in_video is None else use_audio_in_video)
    merge = config.spatial_merge_size
    chunk = config.audio_chunk_positions
    ids: list[int] = []
    images, videos, sps, audio_lengths = [], [], [], []
    image_ranges, video_ranges, audio_ranges = [], [], []
    scaled_videos = config.tokens_per_second is not None

    def text(n):
        ids.extend(draw(st.lists(st.sampled_from(TEXT_IDS.tolist()), min_size=n, max_size=n)))

    kinds = draw(st.lists(_segment_kinds, max_size=2 * max_items + 1))
    num_items = 0
    for kind in kinds:
        if kind == "text":
            text(draw(st.integers(0, max_text)))
            continue
        if num_items >= max_items or (kind == "audio" and not omni):
            continue
        num_items += 1
        wrap = draw(st.booleans())
        if kind == "image":
            h, w = draw(st.integers(1, 5)), draw(st.integers(1, 5))
            images.append((1, h * merge, w * merge))
            if wrap:
                ids.append(config.vision_start_token_id)
            image_ranges.append((len(ids), h * w))
            ids.extend([config.image_token_id] * (h * w))
            if wrap:
                ids.append(config.vision_end_token_id)
        elif kind == "audio":
            frames = draw(st.integers(3, 120))
            n = audio_tokens(frames)
            audio_lengths.append(frames)
            if wrap:
                ids.append(config.audio_start_token_id)
            audio_ranges.append((len(ids), n))
            ids.extend([config.audio_token_id] * n)
            if wrap:
                ids.append(config.audio_end_token_id)
        else:
            t, h, w = draw(st.integers(1, 6)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
            videos.append((t, h * merge, w * merge))
            if scaled_videos:
                if draw(st.booleans()):
                    sp = np.float32(2.0 / draw(st.sampled_from(FPS_VALUES)))
                else:
                    sp = np.float32(draw(st.floats(0, 4, allow_nan=False, width=32)))
                sps.append(sp)
            if av:
                frames = draw(st.integers(3, 160))
                n_a = audio_tokens(frames)
                audio_lengths.append(frames)
                tau = tau_values(t, sps[-1], config.tokens_per_second)
                order = interleave_kinds(tau, h * w, n_a, chunk)
                ids.extend([config.vision_start_token_id, config.audio_start_token_id])
                video_ranges.append((len(ids), len(order)))
                ids.extend(config.video_token_id if k == "V" else config.audio_token_id for k in order)
                ids.extend([config.audio_end_token_id, config.vision_end_token_id])
            else:
                if wrap:
                    ids.append(config.vision_start_token_id)
                video_ranges.append((len(ids), t * h * w))
                ids.extend([config.video_token_id] * (t * h * w))
                if wrap:
                    ids.append(config.vision_end_token_id)
    if not ids:
        text(draw(st.integers(1, max_text)))

    def grid(rows):
        return np.array(rows, dtype=np.int64).reshape(-1, 3)

    def rng(rows):
        return np.array(rows, dtype=np.int64).reshape(-1, 2)

    sp_array = np.array(sps, dtype=np.float32) if sps else None
    if sp_array is not None and not av and draw(st.integers(0, 4)) == 0:
        sp_array = None  # the default, 1.0 per video (the token layout does not depend on it)
    return Prompt(
        config=config,
        token_ids=np.array(ids, dtype=np.int64),
        image_grid_thw=grid(images),
        video_grid_thw=grid(videos),
        second_per_grid_ts=sp_array,
        audio_feature_lengths=np.array(audio_lengths, dtype=np.int64) if audio_lengths else None,
        use_audio_in_video=av,
        image_ranges=rng(image_ranges),
        video_ranges=rng(video_ranges),
        audio_ranges=rng(audio_ranges),
    )
