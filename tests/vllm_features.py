"""Stand-ins for vLLM's multimodal features, and the recorded vLLM 0.33 vectors.

The stand-ins have exactly the attributes the adapter (`mrope_tracker.vllm`) may
read from vLLM 0.33's `MultiModalFeatureSpec`, `PlaceholderRange` and field
elements. Every test builds them with `feature` (one item) or with the
translations below (a recorded vector, a generated prompt), so a change to
what vLLM carries is made here once. tests/vllm_real.py turns them into vLLM's
own classes where vLLM is installed.
"""

from __future__ import annotations

import array
import json
import os

import attrs
import numpy as np
import torch

from mrope_tracker import MRopeConfig

# the vLLM releases whose own code tests/test_vllm_real*.py run (CI's vLLM stage: both, one after the other)
VLLM_RELEASES = ("0.33.", "0.34.")
VECTORS_PATH = os.path.join(os.path.dirname(__file__), "data", "vllm-0.33.0.jsonl")


class TokenBuffer(array.array):
    """Stand-in for vLLM 0.34's `TokenBuffer` (vllm/v1/token_buffer.py), the
    form its scheduler hands a runner a prompt's ids in: an int32
    `array.array` whose slices read as lists."""

    __slots__ = ()

    def __new__(cls, tokens=()):
        return super().__new__(cls, "i", tokens)

    def __getitem__(self, index):
        item = array.array.__getitem__(self, index)
        return item.tolist() if isinstance(index, slice) else item


@attrs.define(eq=False)
class FieldElem:
    """Stand-in for vLLM's MultiModalFieldElem: only `.data` is read."""

    data: object


@attrs.define(eq=False)
class PlaceholderRange:
    """Stand-in for vLLM's PlaceholderRange."""

    offset: object
    length: object
    is_embed: object = None


@attrs.define(eq=False)
class FeatureSpec:
    """Stand-in for vLLM's MultiModalFeatureSpec."""

    modality: object
    mm_position: object
    data: object


def _mask(is_embed, form: str):
    """An is_embed mask in the form vLLM may hand over: a bool tensor (as vLLM does), a bool list or a
    numpy array; "raw" keeps what the test gave (a malformed mask). A tensor passes as is, so tests can
    hand over other dtypes."""
    if is_embed is None or isinstance(is_embed, torch.Tensor) or form == "raw":
        return is_embed
    if form == "list":
        return [bool(x) for x in is_embed]
    if form == "numpy":
        return np.array(is_embed, dtype=bool)
    return torch.tensor(is_embed, dtype=torch.bool)


def _element(value) -> FieldElem:
    """A field element holding a tensor, as vLLM carries multimodal fields. A tensor passes as is (so a test
    fixes its dtype, such as vLLM's float32 second_per_grid_ts); a FieldElem passes as is (for fields vLLM
    carries as lists, such as timestamps); anything else is copied into a tensor."""
    if isinstance(value, FieldElem):
        return value
    return FieldElem(value if isinstance(value, torch.Tensor) else torch.tensor(value))


def feature(modality, offset, length, is_embed=None, *, mask_form: str = "tensor", **fields) -> FeatureSpec:
    """One stand-in feature: `modality` at placeholder (offset, length), an optional is_embed mask, and
    each keyword a data field (`image_grid_thw=[1, 4, 4]`) held in a field element."""
    data = {name: _element(value) for name, value in fields.items()}
    return FeatureSpec(modality, PlaceholderRange(offset, length, _mask(is_embed, mask_form)), data)


def load_vectors() -> list[dict]:
    with open(VECTORS_PATH) as f:
        return [json.loads(line) for line in f]


VECTORS = load_vectors()


def first_vector(predicate) -> dict:
    return next(v for v in VECTORS if predicate(v))


def vllm_config(vector: dict, semantics: str = "vllm-0.33") -> MRopeConfig:
    return MRopeConfig.from_hf_config(vector["config"], semantics=semantics)


def vector_features(vector: dict, is_embed_form: str = "tensor") -> list[FeatureSpec]:
    """One stand-in feature per recorded vLLM placeholder of tests/data/vllm-0.33.0.jsonl, fields as vLLM
    carries them (int64 grids, float32 second_per_grid_ts, bool use_audio_in_video)."""
    ranges = vector["vllm_placeholder_ranges"]
    omni = "audio_start_token_id" in vector["config"]
    features = []
    for k, (offset, length, flags) in enumerate(ranges.get("image", [])):
        grid = vector["image_grid_thw"][k]
        features.append(feature("image", offset, length, flags, mask_form=is_embed_form, image_grid_thw=grid))
    for k, (offset, length, flags) in enumerate(ranges.get("video", [])):
        fields = {"video_grid_thw": vector["video_grid_thw"][k]}
        if vector["second_per_grid_ts"] is not None:
            fields["second_per_grid_ts"] = torch.tensor(vector["second_per_grid_ts"][k], dtype=torch.float32)
        if omni:
            fields["use_audio_in_video"] = vector["use_audio_in_video"]
        if vector["video_timestamps"] is not None:
            fields["timestamps"] = FieldElem(list(vector["video_timestamps"][k]))
        features.append(feature("video", offset, length, flags, mask_form=is_embed_form, **fields))
    audio = sorted(ranges.get("audio", []), key=lambda r: r[0])
    for (offset, length, flags), frames in zip(audio, vector["audio_feature_lengths"] or [], strict=True):
        features.append(feature("audio", offset, length, flags, mask_form=is_embed_form, audio_feature_lengths=frames))
    return features


def prompt_features(prompt, order) -> list[FeatureSpec]:
    """Stand-in features for a strategies.Prompt without audio-in-video blocks, in the given order."""
    features = []
    sp = prompt.second_per_grid_ts
    for k, (offset, length) in enumerate(prompt.image_ranges.tolist()):
        features.append(feature("image", offset, length, image_grid_thw=torch.from_numpy(prompt.image_grid_thw[k])))
    for k, (offset, length) in enumerate(prompt.video_ranges.tolist()):
        fields = {"video_grid_thw": torch.from_numpy(prompt.video_grid_thw[k])}
        if sp is not None:
            fields["second_per_grid_ts"] = sp[k]
        features.append(feature("video", offset, length, **fields))
    for k, (offset, length) in enumerate(prompt.audio_ranges.tolist()):
        features.append(feature("audio", offset, length, audio_feature_lengths=int(prompt.audio_feature_lengths[k])))
    return [features[i] for i in order(len(features))]


def canvas_features(record: dict, closing_ids, with_mask: bool = True) -> list[FeatureSpec]:
    """A recorded MiniCPM-V 4.7 prompt's features (tests/data/vllm-0.33.0-minicpmv4_7.jsonl), as
    vLLM's processor makes them: each item's range from its offset to its last crop's closing
    marker (`closing_ids`: the image and slice end ids), its crops' (h, w) in its `tgt_sizes`
    (images) or `video_tgt_sizes` (videos) field as an int64 tensor, and, `with_mask`, its
    is_embed mask from the record's token types; listed in reverse, as they may come."""
    ids = record["token_ids"]
    features = []
    for item in record["items"]:
        crops, end = 0, item["offset"]
        while crops < len(item["target_sizes"]):
            crops += ids[end] in closing_ids
            end += 1
        field = "tgt_sizes" if item["modality"] == "image" else "video_tgt_sizes"
        mask = torch.tensor([k != 0 for k in record["mm_token_type_ids"][item["offset"] : end]])
        sizes = {field: torch.tensor(item["target_sizes"], dtype=torch.int64)}
        features.append(
            feature(item["modality"], item["offset"], end - item["offset"], mask if with_mask else None, **sizes)
        )
    return features[::-1]
