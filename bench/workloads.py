"""Built-in workloads: the seed PR's prompt cases and cases of the newer
families (MiniCPM-V 4.7's canvas prompts: canvas_workloads.py; the scheduler
scenarios built from these prompts: scenarios.py).

Prompts are built the way the HF processors lay them out (docs/semantics.md);
each carries its token-scan inputs and its placeholder ranges, so every
design can take the form it needs.
"""

from __future__ import annotations

from collections import UserDict

import attrs
import numpy as np
import torch

from mrope_tracker import MRopeConfig

TEXT_ID = 100


def qwen2_5_vl() -> MRopeConfig:
    """Qwen2.5-VL-7B's published values (tokens_per_second 2)."""
    return MRopeConfig(family="qwen2_5_vl", model_type="qwen2_5_vl", tokens_per_second=2)


def qwen3_vl() -> MRopeConfig:
    """Qwen3-VL's published ids (no time scale: frames are timed by text)."""
    return MRopeConfig(family="qwen3_vl", model_type="qwen3_vl")


def glm4v() -> MRopeConfig:
    """GLM-4.1V's published ids."""
    return MRopeConfig(family="glm4v", model_type="glm4v")


def qwen2_5_omni() -> MRopeConfig:
    """Qwen2.5-Omni-7B's published values (position_id_per_seconds 25, 2 s chunks)."""
    return MRopeConfig(family="qwen2_5_omni", model_type="qwen2_5_omni", tokens_per_second=25, seconds_per_chunk=2)


def vllm_families() -> list[tuple[str, MRopeConfig]]:
    """The families served to vLLM 0.33's rules only (no transformers oracle in
    this suite yet), with their published ids."""
    return [
        (label, MRopeConfig(family=family, semantics="vllm-0.33"))
        for label, family in (
            ("PaddleOCR-VL", "paddleocr_vl"),
            ("ERNIE-4.5-VL", "ernie4_5_moe_vl"),
            ("GLM-OCR", "glm_ocr"),
            ("Bailing-MoE-V3-VL", "bailing_moe_v3_vl"),
            ("Cohere Compass", "cohere_compass"),
        )
    ]


# --------------------------------------------------------------------------
# vLLM 0.33's multimodal features, as its processor hands them to a runner
# --------------------------------------------------------------------------


@attrs.define(eq=False)
class FieldElem:
    """Like vLLM's MultiModalFieldElem: the field's tensor in `.data`."""

    data: object


class KwargsItem(UserDict):
    """Like vLLM's MultiModalKwargsItem, a UserDict of field name to element."""


@attrs.define(eq=False)
class PlaceholderRange:
    """Like vLLM's PlaceholderRange: `is_embed` a bool tensor or None."""

    offset: int
    length: int
    is_embed: torch.Tensor | None = None


@attrs.define(eq=False)
class FeatureSpec:
    """Like vLLM's MultiModalFeatureSpec (identifier and hash left out)."""

    modality: str
    mm_position: PlaceholderRange
    data: KwargsItem


def _feature(modality: str, offset: int, length: int, is_embed, **fields) -> FeatureSpec:
    data = KwargsItem({name: FieldElem(value) for name, value in fields.items()})
    return FeatureSpec(modality, PlaceholderRange(offset, length, is_embed), data)


@attrs.frozen(eq=False)
class Prompt:
    token_ids: np.ndarray
    kwargs: dict  # grids, second_per_grid_ts, audio_feature_lengths, use_audio_in_video
    # image_ranges / video_ranges / audio_ranges: (n, 2) int64 arrays, or for
    # per-frame videos (Qwen3-VL, GLM) a list of (offset, length, is_embed)
    ranges: dict
    # what vLLM's runners get: the prompt ids as a list, one feature per item
    # (in prompt order, an audio-in-video track after its video)
    features: list = attrs.field(factory=list)
    token_list: list = attrs.field(factory=list)

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])


class PromptBuilder:
    """Appends text and items, tracking grids and ranges in prompt order."""

    def __init__(self, config: MRopeConfig, timestamp_tokens: int = 4) -> None:
        self.config = config
        self.timestamp_tokens = timestamp_tokens  # per frame of a per-frame video
        self.ids: list[int] = []
        self.images: list[tuple[int, int, int]] = []
        self.videos: list[tuple[int, int, int]] = []
        self.sps: list[float] = []
        self.audio: list[int] = []
        self.ranges: dict[str, list[tuple]] = {"image": [], "video": [], "audio": []}
        self.features: list[FeatureSpec] = []
        self.audio_in_video = False

    def text(self, n: int) -> PromptBuilder:
        self.ids.extend([TEXT_ID] * n)
        return self

    def image(self, h: int, w: int) -> PromptBuilder:
        """An image of (h, w) patches (before merging)."""
        c, m = self.config, self.config.spatial_merge_size
        n = (h // m) * (w // m)
        self.images.append((1, h, w))
        self.ids.append(c.vision_start_token_id)
        self.ranges["image"].append((len(self.ids), n))
        self.features.append(_feature("image", len(self.ids), n, None, image_grid_thw=torch.tensor([1, h, w])))
        self.ids.extend([c.image_token_id] * n)
        self.ids.append(c.vision_end_token_id)
        return self

    def video(self, t: int, h: int, w: int, sp: float = 1.0) -> PromptBuilder:
        """A video of t temporal patches of (h, w) patches, in the family's layout."""
        if self.config.spec.video_blocks == "frames":
            return self._frame_video(t, h, w)
        if self.config.temporal_merge_size:
            return self._merged_video(t, h, w)
        c, m = self.config, self.config.spatial_merge_size
        n = t * (h // m) * (w // m)
        self.videos.append((t, h, w))
        self.sps.append(sp)
        self.ids.append(c.vision_start_token_id)
        self.ranges["video"].append((len(self.ids), n))
        self.features.append(
            _feature("video", len(self.ids), n, None, **self._video_fields(t, h, w, sp, audio_in_video=False))
        )
        self.ids.extend([c.video_token_id] * n)
        self.ids.append(c.vision_end_token_id)
        return self

    def _merged_video(self, t: int, h: int, w: int) -> PromptBuilder:
        """ERNIE-4.5-VL, as vLLM lays it out: t frames merged temporal_merge_size
        at a time, ``VIDEO_START I*(t' h' w') VIDEO_END`` with the image token."""
        c, m = self.config, self.config.spatial_merge_size
        n = (t // c.temporal_merge_size) * (h // m) * (w // m)
        self.videos.append((t, h, w))
        self.ids.append(c.video_start_token_id)
        self.ranges["video"].append((len(self.ids), n))
        self.ids.extend([c.image_token_id] * n)
        self.ids.append(c.video_end_token_id)
        return self

    def _frame_video(self, t: int, h: int, w: int) -> PromptBuilder:
        """Qwen3-VL / GLM: every temporal patch is its own block, told apart by
        timestamp text. Qwen3-VL: ``(ts VS V*h'w' VE)*t``; GLM: ``BOV (BOI
        I*h'w' EOI ts)*t EOV`` (frames reuse the image token). The range spans
        the frames (GLM: BOV to EOV) with is_embed marking the frame tokens."""
        c, m = self.config, self.config.spatial_merge_size
        hw = (h // m) * (w // m)
        glm = self.config.spec.video_brackets
        token = c.image_token_id if glm else c.video_token_id
        self.videos.append((t, h, w))
        start = len(self.ids)
        if glm:
            self.ids.append(c.video_start_token_id)
        for f in range(t):
            if not glm:
                self.ids.extend(_timestamp(f, self.timestamp_tokens))
            self.ids.append(c.vision_start_token_id)
            self.ids.extend([token] * hw)
            self.ids.append(c.vision_end_token_id)
            if glm:
                self.ids.extend(_timestamp(f, self.timestamp_tokens))
        if glm:
            self.ids.append(c.video_end_token_id)
        span = np.array(self.ids[start:], dtype=np.int64)
        self.ranges["video"].append((start, span.shape[0], span == token))
        # vLLM's processor: one range over the frames and the text between
        # them, is_embed marking the frame tokens (one run per frame)
        is_embed = torch.from_numpy(span == token)
        fields = self._video_fields(t, h, w, 1.0)
        if not glm:  # Qwen3-VL's feature also carries the timestamps (which no position reads)
            fields["timestamps"] = [0.5 + f for f in range(t)]
        self.features.append(_feature("video", start, span.shape[0], is_embed, **fields))
        return self

    def _video_fields(self, t: int, h: int, w: int, sp: float, audio_in_video: bool = False) -> dict:
        fields = {"video_grid_thw": torch.tensor([t, h, w])}
        if self.config.tokens_per_second is not None:
            fields["second_per_grid_ts"] = torch.tensor(sp, dtype=torch.float32)
        if self.config.is_omni:
            fields["use_audio_in_video"] = torch.tensor(audio_in_video)
        return fields

    def audio_clip(self, mel_frames: int) -> PromptBuilder:
        c = self.config
        n = audio_tokens(mel_frames)
        self.audio.append(mel_frames)
        self.ids.append(c.audio_start_token_id)
        self.ranges["audio"].append((len(self.ids), n))
        self.features.append(_feature("audio", len(self.ids), n, None, audio_feature_lengths=torch.tensor(mel_frames)))
        self.ids.extend([c.audio_token_id] * n)
        self.ids.append(c.audio_end_token_id)
        return self

    def video_with_audio(self, t: int, h: int, w: int, mel_frames: int, sp: float = 1.0) -> PromptBuilder:
        """An Omni audio-in-video block, interleaved in 2-second chunks as the
        processor lays it out (docs/semantics.md: video chunk j, then audio chunk j)."""
        c, m = self.config, self.config.spatial_merge_size
        hw = (h // m) * (w // m)
        chunk = c.audio_chunk_positions
        num_audio = audio_tokens(mel_frames)
        tau = (np.arange(t, dtype=np.float32) * np.float32(sp)).astype(np.float32) * np.float32(c.tokens_per_second)
        tau = tau.astype(np.float32).astype(np.int64)
        video_chunks = _walk(np.repeat(tau, hw), chunk)
        audio_chunks = _walk(np.arange(num_audio), chunk)
        order: list[int] = []
        for j in range(max(len(video_chunks), len(audio_chunks))):
            if j < len(video_chunks):
                order += [c.video_token_id] * (video_chunks[j][1] - video_chunks[j][0])
            if j < len(audio_chunks):
                order += [c.audio_token_id] * (audio_chunks[j][1] - audio_chunks[j][0])
        self.videos.append((t, h, w))
        self.sps.append(sp)
        self.audio.append(mel_frames)
        self.audio_in_video = True
        self.ids.extend([c.vision_start_token_id, c.audio_start_token_id])
        self.ranges["video"].append((len(self.ids), len(order)))
        # vLLM's processor: the video and its audio track share one range,
        # from audio_start to audio_end inclusive; each is_embed marks its own tokens
        span = torch.tensor([c.audio_start_token_id, *order, c.audio_end_token_id])
        offset = len(self.ids) - 1
        fields = self._video_fields(t, h, w, sp, audio_in_video=True)
        self.features.append(_feature("video", offset, len(order) + 2, span == c.video_token_id, **fields))
        self.features.append(
            _feature(
                "audio",
                offset,
                len(order) + 2,
                span == c.audio_token_id,
                audio_feature_lengths=torch.tensor(mel_frames),
            )
        )
        self.ids.extend(order)
        self.ids.extend([c.audio_end_token_id, c.vision_end_token_id])
        return self

    def build(self) -> Prompt:
        kwargs: dict = {}
        if self.images:
            kwargs["image_grid_thw"] = np.array(self.images, dtype=np.int64)
        if self.videos:
            kwargs["video_grid_thw"] = np.array(self.videos, dtype=np.int64)
            if self.config.tokens_per_second is not None:
                kwargs["second_per_grid_ts"] = np.array(self.sps, dtype=np.float32)
        if self.audio:
            kwargs["audio_feature_lengths"] = np.array(self.audio, dtype=np.int64)
        if self.audio_in_video:
            kwargs["use_audio_in_video"] = True
        ranges = {}
        for kind, items in self.ranges.items():
            if items and len(items[0]) == 3:  # frames located by is_embed masks
                ranges[f"{kind}_ranges"] = list(items)
            elif items:
                ranges[f"{kind}_ranges"] = np.array(items, dtype=np.int64).reshape(-1, 2)
        return Prompt(np.array(self.ids, dtype=np.int64), kwargs, ranges, list(self.features), list(self.ids))


TIMESTAMP_TOKENS = 4  # "<1.5 seconds>" is a few text tokens


def _timestamp(frame: int, num_tokens: int = TIMESTAMP_TOKENS) -> list[int]:
    """A frame's timestamp text: a few ordinary text ids."""
    return [TEXT_ID + 1 + (frame + k) % 10 for k in range(num_tokens)]


def audio_tokens(mel_frames: int) -> int:
    return ((mel_frames - 1) // 2 + 1 - 2) // 2 + 1


def _walk(values: np.ndarray, size: int) -> list[tuple[int, int]]:
    chunks, start, c = [], 0, 1
    for i, v in enumerate(values.tolist()):
        if v >= c * size:
            chunks.append((start, i))
            start, c = i, c + 1
    chunks.append((start, len(values)))
    return chunks


# --------------------------------------------------------------------------
# The seed PR's piecewise cases (the benchmark table of vLLM PR #16881)
# --------------------------------------------------------------------------


def seed_prompt_cases(config: MRopeConfig) -> list[tuple[str, Prompt]]:
    """(name, prompt) for the seed's cases; Omni adds its two audio cases.
    Each item sits between 20 text tokens, as in a chat turn."""

    def case(build):
        b = PromptBuilder(config).text(20)
        build(b)
        return b.text(20).build()

    cases = [
        ("plain text, 360 tokens", PromptBuilder(config).text(360).build()),
        ("1 image, 324 tokens", case(lambda b: b.image(36, 36))),
        ("10 images, 3,240 tokens", case(lambda b: [b.image(36, 36) for _ in range(10)])),
        ("1 large image, 1,296 tokens", case(lambda b: b.image(72, 72))),
        ("1 video of 20 frames, 3,240 tokens", case(lambda b: b.video(20, 18, 36))),
        ("1 video of 200 frames, 32,400 tokens", case(lambda b: b.video(200, 18, 36))),
    ]
    if config.is_omni:
        cases += [
            ("1 audio, 200 tokens", case(lambda b: b.audio_clip(800))),
            ("1 video with audio, 1,296 + 200 tokens", case(lambda b: b.video_with_audio(4, 36, 36, 800))),
        ]
    return cases


def family_prompt_cases(config: MRopeConfig) -> list[tuple[str, Prompt]]:
    """Qwen3-VL / GLM cases: one image, a 64-frame video with per-frame
    timestamps, ten images; each between 20 text tokens."""

    def case(build):
        b = PromptBuilder(config).text(20)
        build(b)
        return b.text(20).build()

    return [
        ("1 image, 324 tokens", case(lambda b: b.image(36, 36))),
        ("1 video of 64 frames, 64 x 144 tokens", case(lambda b: b.video(64, 24, 24))),
        ("10 images, 3,240 tokens", case(lambda b: [b.image(36, 36) for _ in range(10)])),
    ]


def vllm_family_cases(config: MRopeConfig) -> list[tuple[str, Prompt]]:
    """One image, ten images and, where the family has videos, a 64-frame
    video; each between 20 text tokens."""

    def case(build):
        b = PromptBuilder(config).text(20)
        build(b)
        return b.text(20).build()

    cases = [
        ("1 image, 324 tokens", case(lambda b: b.image(36, 36))),
        ("10 images, 3,240 tokens", case(lambda b: [b.image(36, 36) for _ in range(10)])),
    ]
    if config.video_token_id is not None:
        video = case(lambda b: b.video(64, 24, 24))
        cases.insert(1, (f"1 video of 64 frames, {video.num_tokens:,} tokens in all", video))
    return cases


# --------------------------------------------------------------------------
# Families served by vLLM 0.33's rules only (no transformers implementation)
# --------------------------------------------------------------------------

# openPangu-VL's ids were never published: stand-ins (tests/data/configs/openpangu_vl.json)
_PANGU_IDS = {
    "image_token_id": 45819,
    "video_token_id": 45832,
    "vision_start_token_id": 45818,
    "vision_end_token_id": 45820,
}
_KEYE_FRAME_IDS = (151670, 151671, 151672)  # <frame>, <fast_start>, <fast_end>: stand-ins, text either way


def _between_text(ids: list[int]) -> np.ndarray:
    return np.array([TEXT_ID] * 20 + ids + [TEXT_ID] * 20, dtype=np.int64)


def vllm_only_family_cases() -> list[tuple[str, MRopeConfig, str, Prompt]]:
    """(label, config, case, prompt): one case each of Keye-VL, Keye-VL-1.5,
    Isaac and openPangu-VL, laid out as their processors do (docs/semantics.md),
    between 20 text tokens. Token form only: the ranges stay empty."""
    out = []
    keye = MRopeConfig(family="keye")
    ids = [keye.vision_start_token_id] + [keye.video_token_id] * (16 * 144) + [keye.vision_end_token_id]
    video = {"video_grid_thw": np.array([[16, 24, 24]], np.int64)}
    out.append(("Keye-VL", keye, "1 video of 16 frames, 16 x 144 tokens", Prompt(_between_text(ids), video, {})))

    keye15 = MRopeConfig(family="keye_vl1_5")
    frame, fast_start, fast_end = _KEYE_FRAME_IDS
    ids, rows = [keye15.vision_start_token_id], []
    for f in range(16):  # slow frames of 24 x 24 patches, fast ones of 12 x 12
        fast = f % 2 == 1
        side = 12 if fast else 24
        ids += [frame, *_timestamp(f)] + [fast_start] * fast
        ids += [keye15.video_token_id] * (side // 2) ** 2 + [fast_end] * fast
        rows.append([1, side, side])
    ids.append(keye15.vision_end_token_id)
    grids = {"video_grid_thw": np.array(rows, np.int64)}
    out.append(("Keye-VL-1.5", keye15, "1 video of 16 slow and fast frames", Prompt(_between_text(ids), grids, {})))

    isaac = MRopeConfig(family="isaac")
    ids = []
    for k in range(10):
        ids += [TEXT_ID] * (20 if k else 0) + [isaac.image_token_id] * 324
    images = {"image_grid_thw": np.array([[1, 36, 36]] * 10, np.int64)}
    out.append(("Isaac", isaac, "10 images, 3,240 tokens", Prompt(_between_text(ids), images, {})))

    pangu = MRopeConfig(family="openpangu_vl", **_PANGU_IDS)
    frames = [[pangu.video_token_id] * 144] * 16
    ids = [pangu.vision_start_token_id]
    for f, frame_ids in enumerate(frames):
        ids += [pangu.vision_end_token_id, pangu.vision_start_token_id] * (f > 0) + frame_ids
    ids.append(pangu.vision_end_token_id)
    video = {"video_grid_thw": np.array([[16, 24, 24]], np.int64)}
    out.append(("openPangu-VL", pangu, "1 video of 16 frames, 16 x 144 tokens", Prompt(_between_text(ids), video, {})))
    return out
