"""Prompts for `mrope-tracker compare` and the ``hf`` benchmark suite.

`Prompt` holds a prompt's token ids and the item arguments of
`prompt_positions`. `read_prompts` reads them from a JSONL file (one object
a line). `sample_prompts` draws a seeded random sample laid out as each
family's processor lays prompts out: a system prompt, images of common sizes
(224 to 672 px), videos of 4 to 128 frames at common frame rates (1, 2 or 4
fps, or any of 0.1, 0.2, ..., 12.0), audio clips of 1 to 30 s and, for the
Omni families, videos that carry their audio track (each block interleaved
in the layout transformers' get_rope_index assumes).
"""

from __future__ import annotations

import json
import os

import attrs
import numpy as np

from ..core.config import MRopeConfig
from ..families import RUN_VIDEO

__all__ = ["CanvasPrompt", "Prompt", "read_prompts", "sample_canvas_prompts", "sample_prompts"]


@attrs.frozen(eq=False)
class Prompt:
    """One prompt: its token ids and the item arguments of `prompt_positions`."""

    token_ids: np.ndarray
    image_grid_thw: np.ndarray | None = None
    video_grid_thw: np.ndarray | None = None
    second_per_grid_ts: np.ndarray | None = None
    audio_feature_lengths: np.ndarray | None = None
    use_audio_in_video: bool = False

    def kwargs(self) -> dict:
        out = {}
        for name in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts", "audio_feature_lengths"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.use_audio_in_video:
            out["use_audio_in_video"] = True
        return out

    def as_json(self) -> dict:
        out = {"token_ids": self.token_ids.tolist()}
        for name, value in self.kwargs().items():
            out[name] = value.tolist() if isinstance(value, np.ndarray) else value
        return out


_PROMPT_KEYS = {
    "token_ids": np.int64,
    "image_grid_thw": np.int64,
    "video_grid_thw": np.int64,
    "second_per_grid_ts": np.float32,
    "audio_feature_lengths": np.int64,
}


def read_prompts(path) -> list[Prompt]:
    """Prompts from a JSONL file: one object per line with ``token_ids`` and
    optionally ``image_grid_thw``, ``video_grid_thw``, ``second_per_grid_ts``,
    ``audio_feature_lengths``, ``use_audio_in_video`` (and an ``id``, ignored)."""
    prompts = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as exc:
        raise ValueError(f"prompts: expected a readable JSONL file, got {os.fspath(path)!r} ({exc})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"prompts: expected one JSON object per line, got a parse error on line {number} ({exc})"
            ) from None
        if not isinstance(record, dict) or "token_ids" not in record:
            raise ValueError(f"prompts: expected an object with token_ids on line {number}, got {str(record)[:80]}")
        unknown = set(record) - set(_PROMPT_KEYS) - {"use_audio_in_video", "id"}
        if unknown:
            raise KeyError(
                f"prompts: unknown keys {sorted(unknown)} on line {number}; expected {sorted(_PROMPT_KEYS)}, "
                "use_audio_in_video or id"
            )
        fields = {}
        for key, dtype in _PROMPT_KEYS.items():
            if record.get(key) is not None:
                try:
                    fields[key] = np.asarray(record[key], dtype=dtype)
                except (ValueError, TypeError, OverflowError):
                    kind = "numbers" if np.dtype(dtype).kind == "f" else "integers"
                    raise ValueError(
                        f"prompts: {key} on line {number}: expected {kind}"
                        f" (nested lists as the processor returns them), got {str(record[key])[:80]}"
                    ) from None
        av = record.get("use_audio_in_video", False)
        if not isinstance(av, bool):
            raise TypeError(f"prompts: use_audio_in_video on line {number}: expected true or false, got {av!r}")
        prompts.append(Prompt(use_audio_in_video=av, **fields))
    if not prompts:
        raise ValueError(f"prompts: expected at least one prompt in {os.fspath(path)!r}, got none")
    return prompts


_COMMON_FPS = (1.0, 2.0, 2.0, 4.0)
_IMAGE_SIDES = (16, 20, 24, 28, 32, 36, 40, 48)  # patches of 14 px: 224 to 672 px
_FRAME_SIDES = (8, 12, 16, 20, 24)
_TEXT = range(1000, 30000)


class _Builder:
    def __init__(self, config: MRopeConfig, rng: np.random.Generator) -> None:
        self.c, self.rng = config, rng
        self.ids: list[int] = []
        self.images: list[tuple[int, int, int]] = []
        self.videos: list[tuple[int, int, int]] = []
        self.sps: list[float] = []
        self.audio: list[int] = []

    def text(self, lo: int, hi: int) -> None:
        self.ids.extend(int(v) for v in self.rng.integers(_TEXT.start, _TEXT.stop, int(self.rng.integers(lo, hi + 1))))

    def image(self) -> None:
        c, m = self.c, self.c.spatial_merge_size
        h, w = (int(self.rng.choice(_IMAGE_SIDES)) for _ in range(2))
        self.images.append((1, h, w))
        # HunYuan-VL: rows of w' + 1 tokens (a newline ends each), one more token either side
        count = (h // m) * (w // m + 1) + 2 if c.spec.xd_images else (h // m) * (w // m)
        self.ids += [c.vision_start_token_id] + [c.image_token_id] * count + [c.vision_end_token_id]

    def audio_clip(self) -> None:
        c = self.c
        frames = int(self.rng.integers(100, 3001))  # mel frames: clips of one to thirty seconds
        self.audio.append(frames)
        n = int(c.spec.audio_tokens(np.array([frames], np.int64), c)[0])
        self.ids += [c.audio_start_token_id] + [c.audio_token_id] * n + [c.audio_end_token_id]

    def video(self, with_audio: bool) -> None:
        c, m, rng = self.c, self.c.spatial_merge_size, self.rng
        fps = float(rng.choice(_COMMON_FPS)) if rng.integers(0, 2) else int(rng.integers(1, 121)) / 10
        t = int(rng.integers(2, 65))  # temporal patches (two frames each): 4 to 128 frames
        h, w = (int(rng.choice(_FRAME_SIDES)) for _ in range(2))
        hw = (h // m) * (w // m)
        self.videos.append((t, h, w))
        sp = float(np.float32(2.0 / fps))
        if c.spec.scaled_time:
            self.sps.append(sp)
        if c.temporal_merge_size:  # ERNIE: frames merged in time, the image token between the video brackets
            self.videos[-1] = (t * c.temporal_merge_size, h, w)
            self.ids += [c.video_start_token_id] + [c.image_token_id] * (t * hw) + [c.video_end_token_id]
        elif c.spec.video_blocks == "frames":
            self._frames(t, hw)
        elif with_audio:
            frames = max(3, int(round(t * 2.0 / fps * 100)))
            self.audio.append(frames)
            num_audio = int(c.spec.audio_tokens(np.array([frames], np.int64), c)[0])
            layout = "model" if "model" in c.spec.interleaves else "transformers"
            runs = c.spec.interleaves[layout](t, h // m, w // m, 2.0 / fps, num_audio, c)
            self.ids += [c.vision_start_token_id, c.audio_start_token_id]
            for kind, count in runs:
                self.ids += [c.video_token_id if kind == RUN_VIDEO else c.audio_token_id] * count
            self.ids += [c.audio_end_token_id, c.vision_end_token_id]
        else:
            self.ids += [c.vision_start_token_id] + [c.video_token_id] * (t * hw) + [c.vision_end_token_id]

    def _frames(self, t: int, hw: int) -> None:
        """Qwen3-VL: VS (ts VS V*hw VE)*t VE; GLM: BOV (BOI I*hw EOI ts)*t EOV."""
        c = self.c
        if c.spec.video_brackets:
            self.ids.append(c.video_start_token_id)
            for _ in range(t):
                self.ids += [c.vision_start_token_id] + [c.image_token_id] * hw + [c.vision_end_token_id]
                self.text(2, 5)
            self.ids.append(c.video_end_token_id)
            return
        self.ids.append(c.vision_start_token_id)
        for _ in range(t):
            self.text(3, 6)
            self.ids += [c.vision_start_token_id] + [c.video_token_id] * hw + [c.vision_end_token_id]
        self.ids.append(c.vision_end_token_id)

    def build(self, av: bool) -> Prompt:
        grid = lambda rows: np.array(rows, np.int64).reshape(-1, 3) if rows else None  # noqa: E731
        return Prompt(
            token_ids=np.array(self.ids, np.int64),
            image_grid_thw=grid(self.images),
            video_grid_thw=grid(self.videos),
            second_per_grid_ts=np.array(self.sps, np.float32) if self.sps else None,
            audio_feature_lengths=np.array(self.audio, np.int64) if self.audio else None,
            use_audio_in_video=av,
        )


def sample_prompts(config: MRopeConfig, num_prompts: int = 200, seed: int = 0) -> list:
    """A seeded random sample of realistic prompts for `config`'s family: a
    system prompt, then 0-3 images, 0-2 videos and (Omni) 0-2 audio clips in
    random order with text between; half the Omni prompts carry every video's
    audio track inside the video (use_audio_in_video). MiniCPM-V 4.7's are
    `CanvasPrompt`s (`sample_canvas_prompts`)."""
    if config.spec.canvas:
        return sample_canvas_prompts(config, num_prompts, seed)
    if isinstance(num_prompts, bool) or not isinstance(num_prompts, int) or num_prompts < 1:
        raise ValueError(f"num_prompts: expected a positive int, got {num_prompts!r}")
    rng = np.random.default_rng(seed)
    prompts = []
    for _ in range(num_prompts):
        b = _Builder(config, rng)
        av = config.is_omni and bool(rng.integers(0, 2))
        # a family served without images or videos (no placeholder id) gets none
        kinds = ["image"] * (int(rng.integers(0, 4)) if config.image_token_id is not None else 0)
        kinds += ["video"] * (int(rng.integers(0, 3)) if config.video_token_id is not None else 0)
        if config.is_omni:
            kinds += ["audio"] * int(rng.integers(0, 3))
        rng.shuffle(kinds)
        b.text(20, 60)
        for kind in kinds:
            if kind == "image":
                b.image()
            elif kind == "video":
                b.video(av)
            else:
                b.audio_clip()
            b.text(0, 40)
        b.text(1, 20)
        prompts.append(b.build(av and "video" in kinds))
    return prompts


@attrs.frozen(eq=False)
class CanvasPrompt:
    """A MiniCPM-V 4.7 prompt: ids, modality labels and per-crop patch grids
    (the arguments of `mrope_tracker.canvas_positions`)."""

    token_ids: np.ndarray
    mm_token_type_ids: np.ndarray
    target_sizes: np.ndarray | None = None
    target_sizes_videos: np.ndarray | None = None

    def kwargs(self) -> dict:
        return {"target_sizes": self.target_sizes, "target_sizes_videos": self.target_sizes_videos}


_CROP_SIDES = (4, 6, 8, 10, 12)  # LLM tokens a side


class _CanvasBuilder:
    def __init__(self, config: MRopeConfig, rng: np.random.Generator) -> None:
        c = config
        self.m, self.rng = c.spatial_merge_size, rng
        self.markers = (
            c.vision_start_token_id,
            c.vision_end_token_id,
            c.slice_start_token_id,
            c.slice_end_token_id,
            c.newline_token_id,
        )
        free = [v for v in range(_TEXT.stop, _TEXT.stop + 8) if v not in self.markers]
        self.placeholder = {1: free[0], 2: free[1]}
        self.ids: list[int] = []
        self.kinds: list[int] = []
        self.sizes: dict[int, list] = {1: [], 2: []}

    def side(self) -> int:
        return self.m * int(self.rng.choice(_CROP_SIDES))

    def text(self, lo: int, hi: int) -> None:
        n = int(self.rng.integers(lo, hi + 1))
        self.ids.extend(int(v) for v in self.rng.integers(_TEXT.start, _TEXT.stop, n) if v not in self.markers)
        self.kinds.extend([0] * (len(self.ids) - len(self.kinds)))

    def crop(self, kind: int, size: tuple, opening: int, closing: int) -> None:
        n = (size[0] // self.m) * (size[1] // self.m)
        self.ids += [opening] + [self.placeholder[kind]] * n + [closing]
        self.kinds += [0] + [kind] * n + [0]
        self.sizes[kind].append(size)

    def frame(self, kind: int, thumb: tuple, slices: list, cols: int) -> None:
        self.crop(kind, thumb, self.markers[0], self.markers[1])
        for k, size in enumerate(slices):
            if k and k % cols == 0:
                self.ids.append(self.markers[4])
                self.kinds.append(0)
            self.crop(kind, size, self.markers[2], self.markers[3])

    def picture(self) -> None:
        rows, cols = int(self.rng.integers(0, 4)), int(self.rng.integers(1, 4))
        self.frame(1, (self.side(), self.side()), [(self.side(), self.side()) for _ in range(rows * cols)], cols)

    def video(self) -> None:
        rows, cols = int(self.rng.integers(0, 3)), int(self.rng.integers(1, 3))
        thumb, piece = (self.side(), self.side()), (self.side(), self.side())
        for _ in range(int(self.rng.integers(2, 17))):
            self.frame(2, thumb, [piece] * (rows * cols), cols)

    def build(self) -> CanvasPrompt:
        sizes = [np.array(rows, np.int64).reshape(-1, 2) if rows else None for rows in (self.sizes[1], self.sizes[2])]
        return CanvasPrompt(np.array(self.ids, np.int64), np.array(self.kinds, np.int64), *sizes)


def sample_canvas_prompts(config: MRopeConfig, num_prompts: int = 200, seed: int = 0) -> list[CanvasPrompt]:
    """A seeded random sample of MiniCPM-V 4.7 prompts, laid out as its
    processor does: a system prompt, then 0-3 pictures (a thumbnail and 0-3
    rows of 1-3 slices, each its own size) and 0-1 videos (2-16 frames, each
    a thumbnail and 0-2 x 1-2 slices of one size), text between."""
    if isinstance(num_prompts, bool) or not isinstance(num_prompts, int) or num_prompts < 1:
        raise ValueError(f"num_prompts: expected a positive int, got {num_prompts!r}")
    rng = np.random.default_rng(seed)
    prompts = []
    for _ in range(num_prompts):
        b = _CanvasBuilder(config, rng)
        b.text(20, 60)
        items = ["image"] * int(rng.integers(0, 4)) + ["video"] * int(rng.integers(0, 2))
        rng.shuffle(items)
        for item in items:
            b.picture() if item == "image" else b.video()
            b.text(0, 40)
        b.text(1, 20)
        prompts.append(b.build())
    return prompts
