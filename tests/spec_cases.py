"""The documented worked examples and test vectors T1-T7 as plain data.

Source: the worked examples listed in docs/semantics.md (T1-T7, reference
semantics), themselves obtained by running transformers 4.57 and vLLM on the
same prompts. Cases marked "derived by hand" are not among them; their
expected values were worked out on paper from the documented rules (the derivation
is in each case's comment) before any implementation was run on them.

Prompts are written with readable symbols: ``t`` is a text token (each gets its
own id), ``VS``/``VE`` vision start/end, ``AS``/``AE`` audio start/end, ``I``,
``V``, ``A`` image/video/audio placeholders, and ``X*n`` repeats a symbol n times.
`tokens` reads this notation for every test that writes prompts in it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mrope_tracker.core.config import MRopeConfig

# --- configs -----------------------------------------------------------------


def qwen2_vl() -> MRopeConfig:
    """Qwen2-VL: tau(f) = f, merge 2, the published token ids."""
    return MRopeConfig(family="qwen2_vl")


def qwen2_5_vl() -> MRopeConfig:
    """Qwen2.5-VL with the published tokens_per_second = 2."""
    return MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)


def omni() -> MRopeConfig:
    """Qwen2.5-Omni thinker, published values: r = 25, seconds_per_chunk = 2 -> C = 50."""
    return MRopeConfig(family="qwen2_5_omni", tokens_per_second=25, seconds_per_chunk=2)


def omni_toy() -> MRopeConfig:
    """The toy Omni config of example A: r = 2, seconds_per_chunk = 2 -> C = 4."""
    return MRopeConfig(family="qwen2_5_omni", tokens_per_second=2, seconds_per_chunk=2)


# --- prompts -------------------------------------------------------------------

# symbol -> the config attribute holding its id (BV/EV: GLM's begin/end of video)
_SYMBOLS = {
    "VS": "vision_start_token_id",
    "VE": "vision_end_token_id",
    "AS": "audio_start_token_id",
    "AE": "audio_end_token_id",
    "BV": "video_start_token_id",
    "EV": "video_end_token_id",
    "I": "image_token_id",
    "V": "video_token_id",
    "A": "audio_token_id",
}
_TEXT = ("t", "ts")  # text, and timestamp text (Qwen3-VL, GLM): each its own id


def tokens(config, prompt: str) -> list[int]:
    """Token ids of a symbolic prompt such as ``"t VS I*6 VE t"``: ``t``/``ts`` text
    (each its own id from 1000 on), ``X*n`` n times X. `config` is an object with the
    id attributes named in `_SYMBOLS` (MRopeConfig, a namespace), or a dict from
    symbol to id (e.g. `family_prompts.special_ids`)."""
    out: list[int] = []
    text_id = 1000
    for word in prompt.split():
        symbol, _, count = word.partition("*")
        for _ in range(int(count) if count else 1):
            if symbol in _TEXT:
                out.append(text_id)
                text_id += 1
            elif isinstance(config, dict):
                out.append(config[symbol])
            else:
                out.append(getattr(config, _SYMBOLS[symbol]))
    return out


# --- cases -----------------------------------------------------------------------

Rows = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True)
class SpecCase:
    """One prompt and what the spec (or a hand derivation) says its positions are.

    rows: the full T, H, W rows when known. points: token index -> (T, H, W).
    runs: (row "T"/"H"/"W", first token index, values) for partial rows.
    """

    name: str
    source: str
    config: Callable[[], MRopeConfig]
    prompt: str
    delta: int
    image_grid_thw: list | None = None
    video_grid_thw: list | None = None
    second_per_grid_ts: list | None = None
    audio_feature_lengths: list | None = None
    use_audio_in_video: bool = False
    rows: Rows | None = None
    points: tuple[tuple[int, tuple[int, int, int]], ...] = ()
    runs: tuple[tuple[str, int, tuple[int, ...]], ...] = field(default=())

    def kwargs(self) -> dict:
        return dict(
            image_grid_thw=self.image_grid_thw,
            video_grid_thw=self.video_grid_thw,
            second_per_grid_ts=self.second_per_grid_ts,
            audio_feature_lengths=self.audio_feature_lengths,
            use_audio_in_video=self.use_audio_in_video,
        )


def _same(*values: int) -> tuple[int, int, int]:
    return (values[0],) * 3 if len(values) == 1 else tuple(values)


CASES: list[SpecCase] = [
    # ---- T1: Qwen2-VL image, grid (1,4,6) -> 1x2x3.
    SpecCase(
        name="T1_qwen2_vl_image",
        source="T1 (docs/semantics.md, worked example)",
        config=qwen2_vl,
        prompt="t t VS I*6 VE t t",
        image_grid_thw=[[1, 4, 6]],
        delta=-3,
        rows=(
            (0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7, 8),
            (0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7, 8),
            (0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8),
        ),
        points=((9, _same(6)),),  # VE = 6
    ),
    # ---- T2: Qwen2-VL video (3,4,4) -> 3x2x2, T' > max(h', w').
    SpecCase(
        name="T2_qwen2_vl_video",
        source="T2 (docs/semantics.md, video example)",
        config=qwen2_vl,
        prompt="t VS V*12 VE t t",
        video_grid_thw=[[3, 4, 4]],
        delta=-9,
        runs=(("T", 2, (2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4)),),
        points=((14, _same(5)),),  # VE = 5
    ),
    # ---- T3: Qwen2.5-VL r=2, video (4,2,4) -> 4x1x2, sp=1 -> tau 0,2,4,6.
    SpecCase(
        name="T3_qwen2_5_vl_video_sp1",
        source="T3 (docs/semantics.md, worked example)",
        config=qwen2_5_vl,
        prompt="t VS V*8 VE t t",
        video_grid_thw=[[4, 2, 4]],
        second_per_grid_ts=[1.0],
        delta=-1,
        rows=(
            (0, 1, 2, 2, 4, 4, 6, 6, 8, 8, 9, 10, 11),
            (0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 9, 10, 11),
            (0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 9, 10, 11),
        ),
        points=((10, _same(9)),),  # VE = 9
    ),
    # ---- T4: same layout, sp = 0.5 (fps 4) -> tau 0,1,2,3.
    SpecCase(
        name="T4_qwen2_5_vl_video_sp0.5",
        source="T4 (docs/semantics.md, sp = 0.5)",
        config=qwen2_5_vl,
        prompt="t VS V*8 VE t t",
        video_grid_thw=[[4, 2, 4]],
        second_per_grid_ts=[0.5],
        delta=-4,
        runs=(("T", 2, (2, 2, 3, 3, 4, 4, 5, 5)),),
    ),
    # ---- T5: fps 1.2, sp = float32(2/1.2) = 1.6666666; float32 products -> tau 0,3,6,10.
    SpecCase(
        name="T5_qwen2_5_vl_video_fps1.2",
        source="T5 (docs/semantics.md, fps = 1.2)",
        config=qwen2_5_vl,
        prompt="t VS V*8 VE t t",
        video_grid_thw=[[4, 2, 4]],
        second_per_grid_ts=[float(np.float32(2 / 1.2))],
        delta=3,
        runs=(("T", 2, (2, 2, 5, 5, 8, 8, 12, 12)),),  # s = 2 plus tau 0,3,6,10
    ),
    # ---- docs/semantics.md example A / T6: toy Omni (C=4), video (4,2,4) -> 4 frames of 1x2,
    # tau 0,2,4,6; F=24 -> 6 audio tokens; layout V4 A4 V4 A2.
    SpecCase(
        name="T6_omni_audio_in_video_toy",
        source="T6 (docs/semantics.md, worked example A (reference rows))",
        config=omni_toy,
        prompt="t VS AS V*4 A*4 V*4 A*2 AE VE t",
        video_grid_thw=[[4, 2, 4]],
        second_per_grid_ts=[1.0],
        audio_feature_lengths=[24],
        use_audio_in_video=True,
        delta=-10,
        rows=(
            (0, 1, 1, 2, 2, 4, 4, 2, 3, 4, 5, 6, 6, 8, 8, 6, 7, 8, 8, 9),
            (0, 1, 1, 2, 2, 2, 2, 2, 3, 4, 5, 2, 2, 2, 2, 6, 7, 8, 8, 9),
            (0, 1, 1, 2, 3, 2, 3, 2, 3, 4, 5, 2, 3, 2, 3, 6, 7, 8, 8, 9),
        ),
        points=((1, _same(1)), (2, _same(1)), (17, _same(8)), (18, _same(8))),  # VS=AS=1, AE=VE=8
    ),
    # ---- docs/semantics.md example B / T7: real Omni (C=50), video (4,4,4) -> 4 frames of 2x2,
    # tau 0,25,50,75; F=400 -> 100 audio tokens; layout V8 A50 V8 A50.
    SpecCase(
        name="T7_omni_audio_in_video_real",
        source="T7 (docs/semantics.md, worked example B)",
        config=omni,
        prompt="t VS AS V*8 A*50 V*8 A*50 AE VE t",
        video_grid_thw=[[4, 4, 4]],
        second_per_grid_ts=[1.0],
        audio_feature_lengths=[400],
        use_audio_in_video=True,
        delta=-18,
        points=(
            (1, _same(1)),  # VS
            (2, _same(1)),  # AS
            (3, _same(2)),  # first V
            (11, _same(2)),  # first A
            (119, _same(102)),  # AE
            (120, _same(102)),  # VE
            (121, _same(103)),  # last text
        ),
    ),
    # ---- derived by hand: Omni standalone audio, F=20 -> 5 tokens. Audio is 1-D and
    # continues the text (AS at b=1, audio 2..6, AE 7), so P is 0..9 on every row.
    SpecCase(
        name="omni_plain_audio",
        source="derived by hand from the rules in docs/semantics.md (audio-only item)",
        config=omni,
        prompt="t AS A*5 AE t t",
        audio_feature_lengths=[20],
        delta=0,
        rows=(tuple(range(10)),) * 3,
    ),
    # ---- derived by hand: Omni image (1,4,6) -> 1x2x3 at s=2, tau=0; R-max: VE = 2+2+1 = 5;
    # L = 11, max 7 -> delta -3 (same as Qwen2-VL).
    SpecCase(
        name="omni_image",
        source="derived by hand from the rules in docs/semantics.md (image: vision block, tau = 0)",
        config=omni,
        prompt="t VS I*6 VE t t",
        image_grid_thw=[[1, 4, 6]],
        delta=-3,
        rows=(
            (0, 1, 2, 2, 2, 2, 2, 2, 5, 6, 7),
            (0, 1, 2, 2, 2, 3, 3, 3, 5, 6, 7),
            (0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7),
        ),
    ),
    # ---- derived by hand: Omni plain video (use_audio_in_video False), r=25, (2,2,2) ->
    # 2 frames of 1x1 at s=2, tau 0,25; R-max: VE = 2+25+1 = 28, t 29; delta 30-6 = 24.
    SpecCase(
        name="omni_plain_video",
        source="derived by hand from the rules in docs/semantics.md (video without audio)",
        config=omni,
        prompt="t VS V V VE t",
        video_grid_thw=[[2, 2, 2]],
        delta=24,
        rows=(
            (0, 1, 2, 27, 28, 29),
            (0, 1, 2, 2, 28, 29),
            (0, 1, 2, 2, 28, 29),
        ),
    ),
    # ---- derived by hand: standalone audio then audio-in-video, lengths in prompt order
    # [20 (clip, 5 tokens), 11 (video track, 3 tokens)]. Toy C=4. Clip: AS 0, A 1..5, AE 6;
    # t 7; VS=AS=8, s=9; video (2,2,2) -> frames 1x1, tau 0,2 (one chunk); audio 9,10,11
    # (one chunk); layout V V A A A; last chunk max 11 -> AE=VE=12; t 13; delta 14-18 = -4.
    SpecCase(
        name="omni_audio_then_audio_in_video",
        source="derived by hand from docs/semantics.md reference bullets",
        config=omni_toy,
        prompt="AS A*5 AE t VS AS V V A A A AE VE t",
        video_grid_thw=[[2, 2, 2]],
        audio_feature_lengths=[20, 11],
        use_audio_in_video=True,
        delta=-4,
        rows=(
            (0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 11, 9, 10, 11, 12, 12, 13),
            (0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 9, 10, 11, 12, 12, 13),
            (0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 9, 10, 11, 12, 12, 13),
        ),
    ),
    # ---- derived by hand: the HF walker splits a frame (docs/semantics.md "gap" case). Toy C=4,
    # sp=3 -> tau 0,6,12; video (3,2,4) -> 3 frames of 1x2, per-token values 0,0,6,6,12,12:
    # cuts at 2 (6>=4), 4 (12>=8), 5 (12>=12) -> chunks [0,2) [2,4) [4,5) [5,6).
    # F=40 -> 10 audio tokens: [0,4) [4,8) [8,10). Layout V2 A4 V2 A4 V1 A2 V1; s=2.
    # Last chunk = last video token (14,2,3) -> AE=VE=15; t 16; delta 17-22 = -5.
    SpecCase(
        name="omni_audio_in_video_split_frame",
        source="derived by hand from the rules in docs/semantics.md (HF get_chunked_index walker)",
        config=omni_toy,
        prompt="t VS AS V V A*4 V V A*4 V A A V AE VE t",
        video_grid_thw=[[3, 2, 4]],
        second_per_grid_ts=[3.0],
        audio_feature_lengths=[40],
        use_audio_in_video=True,
        delta=-5,
        rows=(
            (0, 1, 1, 2, 2, 2, 3, 4, 5, 8, 8, 6, 7, 8, 9, 14, 10, 11, 14, 15, 15, 16),
            (0, 1, 1, 2, 2, 2, 3, 4, 5, 2, 2, 6, 7, 8, 9, 2, 10, 11, 2, 15, 15, 16),
            (0, 1, 1, 2, 3, 2, 3, 4, 5, 2, 3, 6, 7, 8, 9, 2, 10, 11, 3, 15, 15, 16),
        ),
    ),
    # ---- derived by hand: R-last-chunk below the block maximum (cf. divergence D8(c)). Real Omni;
    # video (1,8,8) -> one 4x4 frame at s=2 (H/W up to 5); F=8 -> 2 audio tokens 2,3;
    # last chunk is audio, max 3 -> AE=VE=4 (below 5); t 5, 6; L=25, delta 7-25 = -18.
    SpecCase(
        name="omni_audio_in_video_short_audio",
        source="derived by hand from the rules in docs/semantics.md (R-last-chunk)",
        config=omni,
        prompt="t VS AS V*16 A A AE VE t t",
        video_grid_thw=[[1, 8, 8]],
        audio_feature_lengths=[8],
        use_audio_in_video=True,
        delta=-18,
        rows=(
            (0, 1, 1) + (2,) * 16 + (2, 3, 4, 4, 5, 6),
            (0, 1, 1) + (2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5) + (2, 3, 4, 4, 5, 6),
            (0, 1, 1) + (2, 3, 4, 5) * 4 + (2, 3, 4, 4, 5, 6),
        ),
    ),
    # ---- derived by hand: two adjacent images with no text between (convention 2).
    # Image 1 (1,4,6) -> 1x2x3 at s=2, next base 2+2+1 = 5; image 2 (1,4,4) -> 1x2x2 at 5,
    # next base 5+1+1 = 7; VE 7, t 8; L = 14, delta 9-14 = -5.
    SpecCase(
        name="qwen2_5_vl_adjacent_images",
        source="derived by hand from the rules in docs/semantics.md",
        config=qwen2_5_vl,
        prompt="t VS I*6 I*4 VE t",
        image_grid_thw=[[1, 4, 6], [1, 4, 4]],
        delta=-5,
        rows=(
            (0, 1, 2, 2, 2, 2, 2, 2, 5, 5, 5, 5, 7, 8),
            (0, 1, 2, 2, 2, 3, 3, 3, 5, 5, 6, 6, 7, 8),
            (0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 5, 6, 7, 8),
        ),
    ),
    # ---- derived by hand: two videos with their own sp, prompt starting with VS.
    # r=2. Video 1 (2,2,4) -> 2x1x2, sp 1 -> tau 0,2 at s=1; next base 1+2+1 = 4 (VE).
    # t 5, VS 6; video 2 (4,2,2) -> 4x1x1, sp 0.25 -> f*0.5 -> tau 0,0,1,1 at s=7;
    # next base 7+1+1 = 9 (VE); L = 13, delta 10-13 = -3.
    SpecCase(
        name="qwen2_5_vl_two_videos",
        source="derived by hand from the rules in docs/semantics.md",
        config=qwen2_5_vl,
        prompt="VS V*4 VE t VS V*4 VE",
        video_grid_thw=[[2, 2, 4], [4, 2, 2]],
        second_per_grid_ts=[1.0, 0.25],
        delta=-3,
        rows=(
            (0, 1, 1, 3, 3, 4, 5, 6, 7, 7, 8, 8, 9),
            (0, 1, 1, 1, 1, 4, 5, 6, 7, 7, 7, 7, 9),
            (0, 1, 2, 1, 2, 4, 5, 6, 7, 7, 7, 7, 9),
        ),
    ),
]
