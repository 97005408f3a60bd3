"""Hypothesis strategies: random prompts of every family, token by token as
each family's processor lays them out, with the published configs.

This is an independent statement of the layouts, written from the project's
description of them (docs/semantics.md and the family notes), not from
transformers, vLLM or our kernels, so that all three can be checked against
it. Grids are (t, h, w) before merging (merge size 2: h = 2h', w = 2w').

Layouts (VS/VE vision start/end, AS/AE audio start/end, I/V/A placeholders,
ts a timestamp's 1-5 text ids):
- qwen2_vl, qwen2_5_vl: image ``VS I*(h'w') VE``; video ``VS V*(t h'w') VE``.
- qwen2_5_omni, qwen3_omni: the same, an audio clip ``AS A*n_a AE``, and with
  use_audio_in_video every video is ``VS AS <interleave> AE VE``.
- qwen3_vl: image as above; video ``VS (ts VS V*(h'w') VE)*t VE`` (the outer
  pair stays, as in vLLM's prompts).
- cohere_compass: image ``VS I*(h'w') VE``; video as qwen3_vl's, the ts being
  transformers 5.24's ``<x.y seconds>`` text (vLLM 0.33 sends no videos).
- glm4v, glm_ocr: image ``BOI I*(h'w') EOI``; video ``BOV (BOI I*(h'w') EOI ts)*t EOV``
  (frames reuse the image token).
- paddleocr_vl: image ``VS I*(h'w') VE``; no videos.
- bailing_moe_v3_vl: image ``VS I*(h'w') VE NL`` (NL the newline vLLM adds); no videos.
- ernie4_5_moe_vl: image ``BOI I*(h'w') EOI``; video of t = 2k frames
  ``BOV V*(k h'w') EOV``, V being the image token in the remote-code config
  (``ernie4_5_moe_vl``) and the video token in transformers 5's (``ernie4_5_vl_moe``).

Audio-in-video interleaves (``prompt.interleave``) for Qwen2.5-Omni, with
rate r = position_id_per_seconds, chunk C = int(r * seconds_per_chunk):
- "transformers": transformers 4.57's processor. Video token times are
  float64 ``(f * sp) * r`` with sp the Python float 2/fps; a walker visits
  the tokens with a counter c = 1 and, when a value reaches c*C, closes the
  chunk before that token and adds one to c (once per token). Audio indices
  are cut the same way; video chunk j then audio chunk j, for every j.
- "model": the same walker on the temporal index the model computes,
  trunc(float32(float32(f * sp) * r)) (sp as float32).
- "vllm": vLLM's processor: frame f goes to chunk tau(f) // C (tau as in
  "model": vLLM multiplies a torch arange by Python floats, in float32);
  chunks 0..last are all visited, empty ones too, each emitting its frames'
  tokens and then min(C, audio left) audio tokens; leftover audio goes last.
Qwen3-Omni ("transformers", its processor): video token times ``(f * sp) * r``
in float64 and audio indices a are merged, a video token first when its time
is <= a; the leftover run of either goes last.

Placeholder ranges come in two forms:
- ``vllm_ranges``: `PlaceholderRange` as vLLM 0.33 reports them: the pad run
  (is_embed None) for images, plain videos and audio clips; a Qwen3-VL (or
  Cohere Compass) video from its first timestamp token to its last frame's
  VE, a GLM video from BOV to EOV, with is_embed marking the vision tokens;
  an Omni audio-in-video block, for its video and its audio item alike, from
  AS to AE, with the video item's is_embed marking the video pads and the
  audio item's the audio pads (as in recorded vLLM 0.33.0 outputs).
- ``image_ranges``/``video_ranges``/``audio_ranges`` (our `from_ranges`
  form): the same, except an Omni audio-in-video block is its interleave only
  (``n_video + n_audio`` tokens after VS AS), listed under videos only.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
from hypothesis import strategies as st

__all__ = [
    "CONFIG_DIR",
    "CONFIG_NAMES",
    "FAMILIES",
    "VLLM_FAMILIES",
    "ALL_FAMILIES",
    "INTERLEAVES",
    "MODEL_TYPES",
    "RANGE_INTERLEAVE_NAMES",
    "TEXT_IDS",
    "AVBlock",
    "FamilyPrompt",
    "PlaceholderRange",
    "audio_token_count",
    "family_prompts",
    "interleave_matches_model",
    "load_config",
    "omni_interleave",
    "prompts_of",
    "special_ids",
    "qwen3_omni_merge",
    "qwen3_omni_processor_times",
    "tau_float32",
    "video_rates",
]

CONFIG_DIR = os.path.join(os.path.dirname(__file__), "data", "configs")
FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen2_5_omni", "qwen3_vl", "glm4v", "qwen3_omni")
# families checked against vLLM 0.33.0's vectors only (no transformers oracle here yet)
VLLM_FAMILIES = ("paddleocr_vl", "ernie4_5_moe_vl", "glm_ocr", "bailing_moe_v3_vl", "cohere_compass")
ALL_FAMILIES = FAMILIES + VLLM_FAMILIES
_IMAGE_ONLY = ("paddleocr_vl", "bailing_moe_v3_vl")
_GLM = ("glm4v", "glm_ocr")
# family -> published config files (tests/data/configs) that serve it
CONFIG_NAMES = {
    "qwen2_vl": ("qwen2_vl",),
    "qwen2_5_vl": ("qwen2_5_vl",),
    "qwen2_5_omni": ("qwen2_5_omni",),
    "qwen3_vl": ("qwen3_vl",),
    "glm4v": ("glm4v", "glm4v_moe"),
    "qwen3_omni": ("qwen3_omni_moe",),
    "paddleocr_vl": ("paddleocr_vl",),
    "ernie4_5_moe_vl": ("ernie4_5_moe_vl", "ernie4_5_vl_moe"),
    "glm_ocr": ("glm_ocr",),
    "bailing_moe_v3_vl": ("bailing_moe_v3_vl",),
    "cohere_compass": ("cohere_compass",),
}
# model_type (a config's, or its thinker's) -> the family that positions it; the one copy in tests/
MODEL_TYPES = {
    "qwen2_vl": "qwen2_vl",
    "qwen2_5_vl": "qwen2_5_vl",
    "qwen2_5_omni": "qwen2_5_omni",
    "qwen2_5_omni_thinker": "qwen2_5_omni",
    "qwen3_vl": "qwen3_vl",
    "qwen3_vl_moe": "qwen3_vl",
    "qwen3_5": "qwen3_vl",
    "qwen3_5_moe": "qwen3_vl",
    "glm4v": "glm4v",
    "glm4v_moe": "glm4v",
    "glm46v": "glm4v",
    "qwen3_omni_moe": "qwen3_omni",
    "qwen3_omni_moe_thinker": "qwen3_omni",
    "paddleocr_vl": "paddleocr_vl",
    "ernie4_5_moe_vl": "ernie4_5_moe_vl",
    "ernie4_5_vl_moe": "ernie4_5_moe_vl",
    "glm_ocr": "glm_ocr",
    "bailing_moe_v3_vl": "bailing_moe_v3_vl",
    "cohere_compass": "cohere_compass",
    # model types vLLM 0.33 serves with a class already covered
    "opencua": "qwen2_5_vl",
    "exaone4_5": "qwen2_5_vl",
    "cosmos3_omni": "qwen3_vl",
    "cosmos3_edge": "qwen3_vl",
    "interns1_pro": "qwen3_vl",
    "intern_s2_preview": "qwen3_vl",
    "interns2_mobius": "qwen3_vl",
    "qwen3_5_text": "text_only",
    "qwen3_5_moe_text": "text_only",
    "minicpmv4_6": "text_only",
    # vLLM 0.33's rules only (tests/vllm_families.py draws their prompts)
    "keye": "keye",
    "keye_vl1_5": "keye_vl1_5",
    "KeyeVL1_5": "keye_vl1_5",
    "isaac": "isaac",
    "openpangu_vl": "openpangu_vl",
    # transformers 5.24's rules only (tests/test_hunyuan_vl.py draws its prompts)
    "hunyuan_vl": "hunyuan_vl",
    # the canvas rule (tests/test_canvas_reference.py draws its prompts)
    "minicpmv4_7": "minicpmv4_7",
}
# family -> audio-in-video layout conventions it can be generated with
INTERLEAVES = {"qwen2_5_omni": ("transformers", "model", "vllm"), "qwen3_omni": ("transformers",)}
# conventions `PromptLayout.from_ranges(interleave=...)` knows by name; others go as explicit runs
RANGE_INTERLEAVE_NAMES = ("transformers", "vllm")
TEXT_IDS = range(100, 200)
_OMNI = ("qwen2_5_omni", "qwen3_omni")


def load_config(name: str) -> dict:
    """A published config by file stem ("qwen2_vl", "glm4v_moe", "qwen3_omni_moe", ...)."""
    path = os.path.join(CONFIG_DIR, f"{name}.json")
    if not os.path.exists(path):
        raise KeyError(f"name: expected a config in tests/data/configs, got {name!r}")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# --------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PlaceholderRange:
    """One multimodal item's span, as vLLM's PlaceholderRange has it."""

    modality: str
    offset: int
    length: int
    is_embed: tuple[bool, ...] | None = None


@dataclasses.dataclass(frozen=True)
class AVBlock:
    """One audio-in-video block: what decides its interleave, and the result."""

    offset: int  # first interleave token (just after VS AS)
    grid: tuple[int, int, int]  # (t, h, w) before merging
    second_per_grid_t: float  # float32 value, as the processors' tensors hold it
    fps: float | None  # the frame rate sp came from (sp = 2 / fps), if any
    num_audio: int
    kinds: str  # "V"/"A" per interleave token, in prompt order


@dataclasses.dataclass(frozen=True)
class FamilyPrompt:
    """A random prompt and everything each entry point takes to position it."""

    family: str
    config_name: str
    config: dict
    token_ids: tuple[int, ...]
    image_grid_thw: tuple[tuple[int, int, int], ...]
    video_grid_thw: tuple[tuple[int, int, int], ...]
    second_per_grid_ts: tuple[float, ...] | None  # float32 values, one per video
    video_fps: tuple[float | None, ...] | None
    video_timestamps: tuple[tuple[float, ...], ...] | None  # Qwen3-VL: seconds per frame
    audio_feature_lengths: tuple[int, ...] | None  # clips and video tracks, prompt order
    use_audio_in_video: bool
    interleave: str | None  # convention of the audio-in-video blocks, None without any
    av_blocks: tuple[AVBlock, ...]
    vllm_ranges: tuple[PlaceholderRange, ...]
    image_ranges: tuple[tuple, ...]
    video_ranges: tuple[tuple, ...]
    audio_ranges: tuple[tuple, ...]

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    def kwargs(self) -> dict:
        """Keyword arguments of prompt_positions / PromptLayout.from_tokens / add_request."""
        kw = {}
        if self.image_grid_thw:
            kw["image_grid_thw"] = np.array(self.image_grid_thw, dtype=np.int64)
        if self.video_grid_thw:
            kw["video_grid_thw"] = np.array(self.video_grid_thw, dtype=np.int64)
        if self.second_per_grid_ts is not None:
            kw["second_per_grid_ts"] = np.array(self.second_per_grid_ts, dtype=np.float32)
        if self.audio_feature_lengths is not None:
            kw["audio_feature_lengths"] = np.array(self.audio_feature_lengths, dtype=np.int64)
        if self.use_audio_in_video:
            kw["use_audio_in_video"] = True
        return kw

    def range_kwargs(self) -> dict:
        """Keyword arguments of PromptLayout.from_ranges (beside config and num_tokens)."""
        kw = self.kwargs()
        if self.image_ranges:
            kw["image_ranges"] = list(self.image_ranges)
        if self.video_ranges:
            kw["video_ranges"] = list(self.video_ranges)
        if self.audio_ranges:
            kw["audio_ranges"] = list(self.audio_ranges)
        if self.interleave is not None:
            named = self.interleave in RANGE_INTERLEAVE_NAMES
            kw["interleave"] = self.interleave if named else self.interleave_runs()
            if named and self.video_fps is not None and all(fps is not None for fps in self.video_fps):
                # a processor convention is rebuilt from the seconds per grid it used,
                # 2 / fps in float64 (positions still take them as float32)
                kw["second_per_grid_ts"] = [2.0 / fps for fps in self.video_fps]
        return kw

    def interleave_runs(self) -> list[list[tuple[str, int]]]:
        """Each audio-in-video block's layout as explicit ("video"|"audio", count) runs."""
        out = []
        for block in self.av_blocks:
            runs: list[list] = []
            for kind in block.kinds:
                name = "video" if kind == "V" else "audio"
                if runs and runs[-1][0] == name:
                    runs[-1][1] += 1
                else:
                    runs.append([name, 1])
            out.append([(name, count) for name, count in runs])
        return out

    def hf_kwargs(self) -> dict:
        """Keyword arguments of hf_oracle.hf_rope_index."""
        kw = self.kwargs()
        if self.video_timestamps is not None:
            kw["video_timestamps"] = [list(ts) for ts in self.video_timestamps]
        return kw


# --------------------------------------------------------------------------
# Counts and interleaves (plain functions, usable outside hypothesis)
# --------------------------------------------------------------------------


def audio_token_count(family: str, num_mel_frames: int) -> int:
    """Audio tokens of a clip with F mel frames.

    Qwen2.5-Omni: two stride-2 reductions, ((F-1)//2 + 1 - 2)//2 + 1.
    Qwen3-Omni: windows of 100 frames give 13 tokens each; the remainder
    r = F % 100 gives g = (r-1)//2 + 1, then ((g-1)//2 + 1 - 1)//2 + 1."""
    if family == "qwen2_5_omni":
        return ((num_mel_frames - 1) // 2 + 1 - 2) // 2 + 1
    if family == "qwen3_omni":
        rest = num_mel_frames % 100
        g = (rest - 1) // 2 + 1
        return ((g - 1) // 2 + 1 - 1) // 2 + 1 + 13 * (num_mel_frames // 100)
    raise ValueError(f"family: expected qwen2_5_omni or qwen3_omni, got {family!r}")


def tau_float32(t: int, sp32: float, rate: float) -> np.ndarray:
    """The model's temporal index of frames 0..t-1: trunc(float32(float32(f * sp) * r))."""
    f = np.arange(t, dtype=np.float32)
    return ((f * np.float32(sp32)).astype(np.float32) * np.float32(rate)).astype(np.float32).astype(np.int64)


def _walker_sizes(values, chunk: int) -> list[int]:
    """Chunk sizes of a non-decreasing sequence cut by the one-step-per-token walker."""
    cuts, c = [], 1
    for i, v in enumerate(values):
        if v >= c * chunk:
            cuts.append(i)
            c += 1
    edges = [0, *cuts, len(values)]
    return [b - a for a, b in zip(edges, edges[1:])]


def _alternate(video_sizes: list[int], audio_sizes: list[int]) -> str:
    out = []
    for j in range(max(len(video_sizes), len(audio_sizes))):
        if j < len(video_sizes):
            out.append("V" * video_sizes[j])
        if j < len(audio_sizes):
            out.append("A" * audio_sizes[j])
    return "".join(out)


def omni_interleave(
    convention: str, t: int, hw: int, sp32: float, sp64: float, num_audio: int, rate: float, seconds_per_chunk: float
) -> str:
    """Qwen2.5-Omni: "V"/"A" per token of one audio-in-video interleave."""
    chunk = int(rate * seconds_per_chunk)
    audio_sizes = _walker_sizes(range(num_audio), chunk)
    if convention == "transformers":
        times = [(f * sp64) * float(rate) for f in range(t) for _ in range(hw)]
        return _alternate(_walker_sizes(times, chunk), audio_sizes)
    tau = tau_float32(t, sp32, rate)
    if convention == "model":
        return _alternate(_walker_sizes(np.repeat(tau, hw).tolist(), chunk), audio_sizes)
    if convention == "vllm":
        chunk_of = tau // chunk
        out, left = [], num_audio
        for c in range(int(chunk_of[-1]) + 1):
            out.append("V" * (hw * int((chunk_of == c).sum())))
            take = min(chunk, left)
            out.append("A" * take)
            left -= take
        out.append("A" * left)
        return "".join(out)
    raise ValueError(f"convention: expected transformers, model or vllm, got {convention!r}")


def qwen3_omni_merge(video_times, num_audio: int) -> str:
    """Qwen3-Omni: merge per-token video times with audio indices 0, 1, ...
    (a video token first when its time is <= the audio index)."""
    out, v, a = [], 0, 0
    while v < len(video_times) and a < num_audio:
        if video_times[v] <= a:
            out.append("V")
            v += 1
        else:
            out.append("A")
            a += 1
    out.append("V" * (len(video_times) - v) + "A" * (num_audio - a))
    return "".join(out)


def qwen3_omni_processor_times(t: int, hw: int, sp64: float, rate: float) -> list[float]:
    """Per-token video times of Qwen3-Omni's processor: float64 (f * sp) * r."""
    return [(f * sp64) * float(rate) for f in range(t) for _ in range(hw)]


def interleave_matches_model(prompt: FamilyPrompt, margin: float = 1e-3) -> bool:
    """True when every audio-in-video block is laid out as transformers'
    get_rope_index assumes when it assigns positions (it never reads which
    token is which): Qwen2.5-Omni the "model" chunking; Qwen3-Omni the merge
    on float32 times, with every time either integral or `margin` away from
    one, so that float32 rounding of base + time cannot reorder a tie."""
    rate = _rate(prompt.family, prompt.config)
    for block in prompt.av_blocks:
        t, h, w = block.grid
        hw = (h // 2) * (w // 2)
        if prompt.family == "qwen2_5_omni":
            spc = float(_thinker(prompt.config).get("seconds_per_chunk", 2))
            expect = omni_interleave("model", t, hw, block.second_per_grid_t, 0.0, block.num_audio, rate, spc)
        else:
            f = np.arange(t, dtype=np.float32)
            times = (f * np.float32(block.second_per_grid_t)).astype(np.float32) * np.float32(rate)
            frac = np.abs(times - np.round(times))
            if np.any((frac > 0) & (frac < margin)):
                return False
            expect = qwen3_omni_merge(np.repeat(times, hw).tolist(), block.num_audio)
        if expect != block.kinds:
            return False
    return True


# --------------------------------------------------------------------------
# Config access
# --------------------------------------------------------------------------


def _thinker(config: dict) -> dict:
    return config.get("thinker_config", config)


def _rate(family: str, config: dict) -> float | None:
    if family == "qwen2_5_vl":
        return float(config["vision_config"].get("tokens_per_second", 4))
    if family in _OMNI:
        return float(_thinker(config).get("position_id_per_seconds", 25))
    return None


def special_ids(family: str, config: dict) -> dict:
    """Special token ids by symbol."""
    c = _thinker(config)
    if family == "ernie4_5_moe_vl":
        image = c.get("im_patch_id", c.get("image_token_id"))
        return dict(
            I=image,
            V=c.get("video_token_id", image),  # the remote-code config: videos use the image token
            BOI=c["image_start_token_id"],
            EOI=c["image_end_token_id"],
            BOV=c["video_start_token_id"],
            EOV=c["video_end_token_id"],
        )
    if family in _GLM:
        return dict(
            I=c["image_token_id"],
            BOI=c["image_start_token_id"],
            EOI=c["image_end_token_id"],
            BOV=c["video_start_token_id"],
            EOV=c["video_end_token_id"],
        )
    ids = dict(
        I=c.get("image_token_id", c.get("image_token_index")),
        V=c.get("video_token_id", c.get("video_token_index")),
        VS=c["vision_start_token_id"],
        VE=c["vision_end_token_id"],
    )
    if family == "bailing_moe_v3_vl":
        ids["NL"] = c.get("newline_token_id", 198)
    if family in _OMNI:
        ids.update(
            A=c.get("audio_token_id", c.get("audio_token_index")),
            AS=c["audio_start_token_id"],
            AE=c["audio_end_token_id"],
        )
    return ids


# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------


@st.composite
def _text(draw, min_size: int, max_size: int) -> list[int]:
    return draw(st.lists(st.sampled_from(TEXT_IDS), min_size=min_size, max_size=max_size))


@st.composite
def _image_grid(draw) -> tuple[int, int, int]:
    return (1, 2 * draw(st.integers(1, 6)), 2 * draw(st.integers(1, 6)))


@st.composite
def _video_grid(draw, max_t: int) -> tuple[int, int, int]:
    """Mostly short videos with small frames; one in eight long, with 1-2 x 1-2 frames."""
    if max_t > 8 and draw(st.integers(0, 7)) == 0:
        return (draw(st.integers(9, max_t)), 2 * draw(st.integers(1, 2)), 2 * draw(st.integers(1, 2)))
    return (draw(st.integers(1, min(8, max_t))), 2 * draw(st.integers(1, 4)), 2 * draw(st.integers(1, 4)))


@st.composite
def video_rates(draw, integer_sp: bool = False) -> tuple[float, float, float | None]:
    """(sp32, sp64, fps): seconds per temporal patch, as float32 and as the
    processor's Python float 2/fps. `integer_sp`: sp in 1..20 (mostly 1-4)."""
    if integer_sp:
        k = draw(st.integers(1, 4)) if draw(st.integers(0, 4)) else draw(st.integers(1, 20))
        return float(np.float32(k)), float(k), 2.0 / k
    fps = draw(st.integers(1, 120)) / 10  # 0.1 ... 12.0
    sp64 = 2.0 / fps
    return float(np.float32(sp64)), sp64, fps


@st.composite
def _mel_frames(draw, family: str) -> int:
    """Mel-frame counts: mostly short clips, one in six long (several chunks)."""
    low = 3 if family == "qwen2_5_omni" else 1
    if draw(st.integers(0, 5)) == 0:
        return draw(st.integers(low, 1200))
    return draw(st.integers(low, 250))


class _Builder:
    def __init__(self, family: str, config: dict):
        self.family, self.config, self.sym = family, config, special_ids(family, config)
        self.ids: list[int] = []
        self.images, self.videos, self.sps, self.fps, self.stamps, self.audio = [], [], [], [], [], []
        self.av_blocks: list[AVBlock] = []
        self.vllm: list[PlaceholderRange] = []
        self.ranges = {"image": [], "video": [], "audio": []}

    def put(self, *symbols: str) -> None:
        self.ids.extend(self.sym[s] for s in symbols)

    def run(self, modality: str, symbol: str, n: int) -> None:
        """A pad run that is the whole item (range = the run)."""
        self.vllm.append(PlaceholderRange(modality, len(self.ids), n))
        self.ranges[modality].append((len(self.ids), n))
        self.ids.extend([self.sym[symbol]] * n)


@st.composite
def family_prompts(
    draw,
    family: str | None = None,
    *,
    config_name: str | None = None,
    interleave: str | None = None,
    use_audio_in_video: bool | None = None,
    integer_sp: bool = False,
    max_items: int = 4,
    max_text: int = 6,
    max_t: int | None = None,
    min_videos: int = 0,
) -> FamilyPrompt:
    """A random prompt of `family` (any family when None) with up to `max_items`
    images, videos and (Omni) audio clips in any order, with text runs of
    0..`max_text` ids between and around them.

    `integer_sp` draws integral second_per_grid_ts (else fps 0.1..12);
    `interleave` picks the audio-in-video convention (random when None);
    `max_t` caps temporal patches (default 64, Omni audio-in-video 300);
    `min_videos` adds videos until there are that many."""
    if family is None:
        family = draw(st.sampled_from(FAMILIES))
    if family not in CONFIG_NAMES:
        raise ValueError(f"family: expected one of {ALL_FAMILIES}, got {family!r}")
    if config_name is None:
        config_name = draw(st.sampled_from(CONFIG_NAMES[family]))
    config = load_config(config_name)
    omni = family in _OMNI
    av = omni and (draw(st.booleans()) if use_audio_in_video is None else use_audio_in_video)
    if av:
        if interleave is None:
            interleave = draw(st.sampled_from(INTERLEAVES[family]))
        elif interleave not in INTERLEAVES[family]:
            raise ValueError(f"interleave: expected one of {INTERLEAVES[family]} for {family}, got {interleave!r}")
    rate = _rate(family, config)
    b = _Builder(family, config)
    kinds = ["image"] + ([] if family in _IMAGE_ONLY else ["video"]) + (["audio"] if omni else [])
    items = draw(st.lists(st.sampled_from(kinds), max_size=max_items))
    while items.count("video") < min_videos and family not in _IMAGE_ONLY:
        items.insert(draw(st.integers(0, len(items))), "video")
    b.ids.extend(draw(_text(0, max_text)))
    used_av = False
    for kind in items:
        if kind == "image":
            grid = draw(_image_grid())
            n = (grid[1] // 2) * (grid[2] // 2)
            b.images.append(grid)
            bos, eos = ("BOI", "EOI") if family in (*_GLM, "ernie4_5_moe_vl") else ("VS", "VE")
            b.put(bos)
            b.run("image", "I", n)
            b.put(eos)
            if family == "bailing_moe_v3_vl":
                b.put("NL")
        elif kind == "audio":
            frames = draw(_mel_frames(family))
            b.audio.append(frames)
            b.put("AS")
            b.run("audio", "A", audio_token_count(family, frames))
            b.put("AE")
        else:
            cap = max_t if max_t is not None else (300 if av else 64)
            grid = draw(_video_grid(cap))
            t, hw = grid[0], (grid[1] // 2) * (grid[2] // 2)
            if family == "ernie4_5_moe_vl":  # t frames: 2t in the grid, merged two by two
                grid = (2 * t, grid[1], grid[2])
            b.videos.append(grid)
            if rate is not None:
                sp32, sp64, fps = draw(video_rates(integer_sp))
                b.sps.append(sp32)
                b.fps.append(fps)
            if family in ("qwen3_vl", "cohere_compass"):
                _qwen3_vl_video(draw, b, t, hw)
            elif family in _GLM:
                _glm_video(draw, b, t, hw)
            elif family == "ernie4_5_moe_vl":
                b.put("BOV")
                b.run("video", "V", t * hw)
                b.put("EOV")
            elif av:
                used_av = True
                frames = draw(_mel_frames(family))
                b.audio.append(frames)
                _av_block(b, grid, sp32, sp64, fps, audio_token_count(family, frames), interleave, rate)
            else:
                b.put("VS")
                b.run("video", "V", t * hw)
                b.put("VE")
        b.ids.extend(draw(_text(0, max_text)))
    if not b.ids:
        b.ids.extend(draw(_text(1, max_text + 1)))
    return FamilyPrompt(
        family=family,
        config_name=config_name,
        config=config,
        token_ids=tuple(b.ids),
        image_grid_thw=tuple(b.images),
        video_grid_thw=tuple(b.videos),
        second_per_grid_ts=tuple(b.sps) if b.videos and rate is not None else None,
        video_fps=tuple(b.fps) if b.videos and rate is not None else None,
        video_timestamps=tuple(b.stamps) if family == "qwen3_vl" and b.videos else None,
        audio_feature_lengths=tuple(b.audio) if b.audio else None,
        use_audio_in_video=av,
        interleave=interleave if used_av else None,
        av_blocks=tuple(b.av_blocks),
        vllm_ranges=tuple(b.vllm),
        image_ranges=tuple(b.ranges["image"]),
        video_ranges=tuple(b.ranges["video"]),
        audio_ranges=tuple(b.ranges["audio"]),
    )


def _framed_video(b: _Builder, tokens: list[int], embed: list[bool]) -> None:
    """A per-frame video whose range covers `tokens` (is_embed: `embed`)."""
    mask = tuple(embed)
    b.vllm.append(PlaceholderRange("video", len(b.ids), len(tokens), mask))
    b.ranges["video"].append((len(b.ids), len(tokens), mask))
    b.ids.extend(tokens)


def _qwen3_vl_video(draw, b: _Builder, t: int, hw: int) -> None:
    """VS (ts VS V*hw VE)*t VE; timestamps at 2 fps, two frames a patch."""
    sym = b.sym
    tokens, embed = [], []
    for _ in range(t):
        stamp = draw(_text(1, 5))
        frame = [sym["VS"]] + [sym["V"]] * hw + [sym["VE"]]
        tokens += stamp + frame
        embed += [False] * (len(stamp) + 1) + [True] * hw + [False]
    b.stamps.append(tuple(round(f + 0.25, 1) for f in range(t)))
    b.put("VS")
    _framed_video(b, tokens, embed)
    b.put("VE")


def _glm_video(draw, b: _Builder, t: int, hw: int) -> None:
    """BOV (BOI I*hw EOI ts)*t EOV; the range runs from BOV to EOV."""
    sym = b.sym
    tokens, embed = [sym["BOV"]], [False]
    for _ in range(t):
        stamp = draw(_text(1, 5))
        tokens += [sym["BOI"]] + [sym["I"]] * hw + [sym["EOI"]] + stamp
        embed += [False] + [True] * hw + [False] * (1 + len(stamp))
    tokens.append(sym["EOV"])
    embed.append(False)
    _framed_video(b, tokens, embed)


def _av_block(b: _Builder, grid, sp32: float, sp64: float, fps, num_audio: int, convention: str, rate: float) -> None:
    """VS AS <interleave> AE VE, laid out by `convention`."""
    t, hw = grid[0], (grid[1] // 2) * (grid[2] // 2)
    if b.family == "qwen2_5_omni":
        spc = float(_thinker(b.config).get("seconds_per_chunk", 2))
        kinds = omni_interleave(convention, t, hw, sp32, sp64, num_audio, rate, spc)
    else:
        kinds = qwen3_omni_merge(qwen3_omni_processor_times(t, hw, sp64, rate), num_audio)
    n = len(kinds)
    b.put("VS")
    start = len(b.ids)  # AS: where vLLM's range starts
    for modality, kind in (("video", "V"), ("audio", "A")):
        mask = (False, *(k == kind for k in kinds), False)
        b.vllm.append(PlaceholderRange(modality, start, n + 2, mask))
    b.put("AS")
    b.ranges["video"].append((len(b.ids), n))
    b.av_blocks.append(AVBlock(len(b.ids), tuple(grid), sp32, fps, num_audio, kinds))
    b.ids.extend(b.sym[k] for k in kinds)
    b.put("AE", "VE")


def prompts_of(families=FAMILIES, **kwargs):
    """`family_prompts` over several families (same keyword arguments)."""
    return st.sampled_from(tuple(families)).flatmap(lambda family: family_prompts(family, **kwargs))
