"""Random prompts of the families whose only rule is vLLM 0.33's (Keye-VL,
Keye-VL-1.5, Isaac, openPangu-VL), laid out as their processors do, with
every form our entry points take: token ids and grids, placeholder ranges,
and vLLM-style features (stand-ins with the attributes the adapter reads).

Written from the layouts described in docs/semantics.md, not from our
kernels. Grids are (t, h, w) before merging (merge 2: h = 2h', w = 2w');
VS/VE are vision start/end, I/V the image and video pads, ts 0-3 text ids:
- keye: image ``VS I*(h'w') VE``; video ``VS V*(t h'w') VE``, its range the
  pad run (every frame back to back).
- keye_vl1_5: image as keye; video ``VS (FR ts [FS] V*(h_f'w_f') [FE])* VE``
  with frames of two sizes (slow, and fast ones inside FS/FE). Its grid is
  one [1, h, w] row per frame; its vLLM range runs from the first FR to the
  last frame's end, is_embed marking the pads.
- isaac: images only, ``I*(h'w')`` with no brackets (images may touch).
- openpangu_vl: image ``VS I*(h'w') VE``; video ``VS V*(h'w') (VE VS
  V*(h'w'))*(t-1) VE``, its vLLM range everything between the outer pair.
  Its ids are unknown: the configs carry stand-ins, which `token_config`
  passes to MRopeConfig explicitly.
"""

from __future__ import annotations

import dataclasses
import json
import os

import attrs
import numpy as np
from hypothesis import strategies as st
from vllm_features import FeatureSpec, feature

from mrope_tracker import MRopeConfig

FAMILIES = ("keye", "keye_vl1_5", "isaac", "openpangu_vl")
CONFIG_DIR = os.path.join(os.path.dirname(__file__), "data", "configs")
MORE_VECTORS_PATH = os.path.join(os.path.dirname(__file__), "data", "vllm-0.33.0-more.jsonl")
TEXT_IDS = range(1000, 1100)
# openPangu's stand-in ids (configs/openpangu_vl.json), as MRopeConfig fields
_PANGU_STANDINS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")


def load_config(family: str) -> dict:
    with open(os.path.join(CONFIG_DIR, f"{family}.json"), encoding="utf-8") as f:
        return json.load(f)


def load_more_vectors(families=FAMILIES) -> list[dict]:
    """The recorded vLLM 0.33.0 prompts of `families` (tests/data/vllm-0.33.0-more.jsonl)."""
    with open(MORE_VECTORS_PATH, encoding="utf-8") as f:
        return [v for v in map(json.loads, f) if v["family"] in families]


def token_config(config: dict, semantics: str = "vllm-0.33") -> MRopeConfig:
    """The config as read, plus openPangu's stand-in ids where the real ones are unknown."""
    mrope = MRopeConfig.from_hf_config(config, semantics=semantics)
    standins = {name: config[f"{name}_STANDIN"] for name in _PANGU_STANDINS if f"{name}_STANDIN" in config}
    return attrs.evolve(mrope, **standins) if standins else mrope


def special_ids(config: dict) -> dict:
    """VS, VE, I, V (and Keye-1.5's FR, FS, FE) of a config, stand-ins included."""

    def pick(name):
        return config.get(name, config.get(f"{name}_STANDIN"))

    ids = {"VS": pick("vision_start_token_id"), "VE": pick("vision_end_token_id")}
    ids.update(I=pick("image_token_id"), V=pick("video_token_id"))
    ids.update(FR=pick("frame_token_id"), FS=pick("fast_start_token_id"), FE=pick("fast_end_token_id"))
    return ids


def vector_features(vector: dict) -> list[FeatureSpec]:
    """Stand-in features of a recorded vector: every recorded data field as a tensor."""
    out = []
    for f in vector["mm_features"]:
        fields = {k: v for k, v in f.items() if k not in ("modality", "offset", "length", "is_embed")}
        out.append(feature(f["modality"], f["offset"], f["length"], f["is_embed"], **fields))
    return out


def flat_video_grid(vector: dict):
    """video_grid_thw of a vector as the token form takes it (Keye-1.5: every frame row)."""
    grids = vector["video_grid_thw"]
    if grids and vector["family"] == "keye_vl1_5":
        return [row for video in grids for row in video]
    return grids


@dataclasses.dataclass
class Prompt:
    family: str
    config: dict
    token_ids: list[int]
    image_grid_thw: list  # rows (1, h, w)
    video_grid_thw: list  # token form rows (Keye-1.5: one per frame)
    image_ranges: list  # (offset, length) of each image's pads
    video_ranges: list  # from_ranges form: one per video_grid_thw row, with is_embed where needed
    features: list  # vLLM-style stand-ins, in prompt order

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    def kwargs(self) -> dict:
        kw = {}
        if self.image_grid_thw:
            kw["image_grid_thw"] = np.array(self.image_grid_thw, np.int64)
        if self.video_grid_thw:
            kw["video_grid_thw"] = np.array(self.video_grid_thw, np.int64)
        return kw

    def range_kwargs(self) -> dict:
        kw = self.kwargs()
        if self.image_ranges:
            kw["image_ranges"] = self.image_ranges
        if self.video_ranges:
            kw["video_ranges"] = self.video_ranges
        return kw


def _size(draw, small: bool = False) -> tuple[int, int]:
    top = 3 if small else 6
    return 2 * draw(st.integers(1, top)), 2 * draw(st.integers(1, top))


@st.composite
def prompts(draw, families=FAMILIES, max_items: int = 4) -> Prompt:
    family = draw(st.sampled_from(families))
    config = load_config(family)
    ids = special_ids(config)
    tokens: list[int] = []
    images, videos, image_ranges, video_ranges, features = [], [], [], [], []

    def text(lo=0, hi=4):
        tokens.extend(draw(st.lists(st.sampled_from(TEXT_IDS), min_size=lo, max_size=hi)))

    kinds = draw(st.lists(st.sampled_from(("image",) if family == "isaac" else ("image", "video")), max_size=max_items))
    for kind in kinds:
        text(0, 4)
        if kind == "image":
            h, w = _size(draw)
            n = (h // 2) * (w // 2)
            if family != "isaac":
                tokens.append(ids["VS"])
            offset = len(tokens)
            tokens.extend([ids["I"]] * n)
            if family != "isaac":
                tokens.append(ids["VE"])
            images.append([1, h, w])
            image_ranges.append((offset, n))
            embed = [True] * n if family == "isaac" else None  # as vLLM reports Isaac's
            features.append(feature("image", offset, n, embed, image_grid_thw=[1, h, w]))
        elif family == "keye":
            t = draw(st.integers(1, 3))
            h, w = _size(draw)
            n = t * (h // 2) * (w // 2)
            tokens.append(ids["VS"])
            offset = len(tokens)
            tokens.extend([ids["V"]] * n)
            tokens.append(ids["VE"])
            videos.append([t, h, w])
            video_ranges.append((offset, n))
            features.append(feature("video", offset, n, None, video_grid_thw=[t, h, w]))
        elif family == "keye_vl1_5":
            slow, fast = _size(draw), _size(draw, small=True)
            kinds_f = draw(st.lists(st.booleans(), min_size=1, max_size=4))  # True: a fast frame
            tokens.append(ids["VS"])
            offset = len(tokens)
            rows, embed = [], []
            for is_fast in kinds_f:
                h, w = fast if is_fast else slow
                n = (h // 2) * (w // 2)
                start = len(tokens)
                tokens.append(ids["FR"])
                text(0, 3)  # the timestamp
                if is_fast:
                    tokens.append(ids["FS"])
                embed += [False] * (len(tokens) - start)
                video_ranges.append((len(tokens), n))
                tokens.extend([ids["V"]] * n)
                embed += [True] * n
                if is_fast:
                    tokens.append(ids["FE"])
                    embed.append(False)
                rows.append([1, h, w])
            tokens.append(ids["VE"])
            videos.extend(rows)
            length = len(embed)
            features.append(feature("video", offset, length, embed, video_grid_thw=rows, num_frames=len(rows)))
        else:  # openpangu_vl
            t = draw(st.integers(1, 3))
            h, w = _size(draw)
            hw = (h // 2) * (w // 2)
            tokens.append(ids["VS"])
            offset = len(tokens)
            embed = []
            for f in range(t):
                if f:
                    tokens.extend([ids["VE"], ids["VS"]])
                    embed += [False, False]
                tokens.extend([ids["V"]] * hw)
                embed += [True] * hw
            tokens.append(ids["VE"])
            videos.append([t, h, w])
            length = len(embed)
            # the range form locates the frames either way: by is_embed, or by the 2-token gap
            with_mask = draw(st.booleans())
            video_ranges.append((offset, length, embed) if with_mask else (offset, length))
            features.append(feature("video", offset, length, embed, video_grid_thw=[t, h, w]))
    # trailing text more often than not: Isaac's rule for it differs from the rest
    text(0 if kinds and draw(st.booleans()) else 1, 5)
    if not tokens:
        tokens.append(TEXT_IDS[0])
    return Prompt(family, config, tokens, images, videos, image_ranges, video_ranges, features)
