"""MiniCPM-V 4.7's canvas positions: the torch reference against worked
examples, bad input, and transformers 5.24's own ``get_rope_index``.

Random prompts are laid out as transformers 5.24's MiniCPMV4_7Processor lays
them out: an image is an optional ``<image_id>k</image_id>`` tag, then
``<image> T*n </image>`` and, when sliced, rows of ``<slice> T*n </slice>``
joined by newlines (each slice its own size); a video is its frames back to
back, each ``<image> V*n </image>`` with optional equal-sized slices. Text
between items may hold newlines (markers to the rule, which let a picture join
the previous one's group). The oracle tests are skipped where transformers 5.24
is not installed (the CI's transformers-5 environment runs them).

tests/data/vllm-0.33.0-minicpmv4_7.jsonl holds 60 such prompts with the
positions vLLM 0.33.0's own ``MiniCPMV4_7ForConditionalGeneration``
(``_init_canvas_mrope`` and ``get_mrope_input_positions``, run on CPU on a
stand-in model holding only the config) gave them; every sixth was recorded
without the config's ``uses_mrope_canvas`` flag, where vLLM numbers every
token by its index.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from mrope_tracker import reference

# Stand-in ids: the rule reads only which token is which marker.
IM_START, IM_END, SL_START, SL_END, NEWLINE = 900, 901, 902, 903, 904
IMAGE, VIDEO = 910, 911
ID_START, ID_END = 905, 906  # <image_id>, </image_id>: text to the rule
TEXT_IDS = range(100, 200)
CONFIG = {
    "image_start_id": IM_START,
    "image_end_id": IM_END,
    "slice_start_id": SL_START,
    "slice_end_id": SL_END,
    "newline_id": NEWLINE,
    "downsample_mode": "16x",
}


class Prompt:
    """A prompt under construction: ids, modality labels and crop sizes."""

    def __init__(self):
        self.ids: list[int] = []
        self.kinds: list[int] = []
        self.sizes = {1: [], 2: []}

    def text(self, ids):
        self.ids += ids
        self.kinds += [0] * len(ids)

    def crop(self, kind: int, size: tuple[int, int], merge: int, opening: int, closing: int):
        n = (size[0] // merge) * (size[1] // merge)
        self.text([opening])
        self.ids += [IMAGE if kind == 1 else VIDEO] * n
        self.kinds += [kind] * n
        self.text([closing])
        self.sizes[kind].append(size)

    def frame(self, kind: int, thumb, slices, cols: int, merge: int):
        self.crop(kind, thumb, merge, IM_START, IM_END)
        for k, size in enumerate(slices):
            if k and k % cols == 0:
                self.text([NEWLINE])
            self.crop(kind, size, merge, SL_START, SL_END)


def _size(draw, merge: int) -> tuple[int, int]:
    return (merge * draw(st.integers(1, 4)), merge * draw(st.integers(1, 4)))


@st.composite
def prompts(draw, merge: int, max_items: int = 3) -> Prompt:
    """A random prompt of images and videos, laid out as the processor does."""
    prompt = Prompt()
    text = st.lists(st.one_of(st.sampled_from(TEXT_IDS), st.just(NEWLINE)), max_size=4)
    prompt.text(draw(text))
    for image_k in range(draw(st.integers(0, max_items))):
        if draw(st.booleans()):  # an image
            if draw(st.booleans()):
                prompt.text([ID_START, 100 + image_k, ID_END])
            rows, cols = (draw(st.integers(1, 3)), draw(st.integers(1, 3))) if draw(st.booleans()) else (0, 1)
            slices = [_size(draw, merge) for _ in range(rows * cols)]
            prompt.frame(1, _size(draw, merge), slices, cols, merge)
        else:  # a video: frames back to back, slices all one size
            rows, cols = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if draw(st.booleans()) else (0, 1)
            frame_size, slice_size = _size(draw, merge), _size(draw, merge)
            for _ in range(draw(st.integers(1, 3))):
                prompt.frame(2, frame_size, [slice_size] * (rows * cols), cols, merge)
        prompt.text(draw(text))
    if not prompt.ids:
        prompt.text([draw(st.sampled_from(TEXT_IDS))])
    return prompt


def _positions(prompt: Prompt, mode: str = "16x"):
    return reference.canvas_prompt_positions(
        CONFIG,
        prompt.ids,
        prompt.kinds,
        target_sizes=prompt.sizes[1] or None,
        target_sizes_videos=prompt.sizes[2] or None,
        downsample_mode=mode,
    )


def test_worked_example():
    """docs/minicpmv4_7-notes.md's example: text, a 2 x 2-sliced image, text."""
    prompt = Prompt()
    prompt.text([7, 8])
    # thumbnail 3 x 3 tokens, four 2 x 2 slices in two rows: canvas 4 x 4
    prompt.frame(1, (12, 12), [(8, 8)] * 4, 2, 4)
    prompt.text([NEWLINE, 9])
    positions, delta = _positions(prompt)
    thumb_h = [2, 2, 2, 4, 4, 4, 5, 5, 5]
    thumb_w = [2, 4, 5, 2, 4, 5, 2, 4, 5]

    def slice_(top, left):  # <slice> tokens </slice> as (H, W) pairs
        cells = [(top + i, left + j) for i in range(2) for j in range(2)]
        return [(top, left), *cells, (top + 1, left + 1)]

    hw = [(0, 0), (1, 1), (1, 1), *zip(thumb_h, thumb_w), (6, 6)]
    hw += slice_(2, 2) + slice_(2, 4) + [(3, 6)] + slice_(4, 2) + slice_(4, 4) + [(2, 2)]
    expected_h = [h for h, _ in hw] + [7]
    expected_w = [w for _, w in hw] + [7]
    expected_t = [0, 1] + [2] * (len(hw) - 2) + [7]
    assert positions.tolist() == [expected_t, expected_h, expected_w]
    assert delta == 8 - len(prompt.ids)


def test_video_frames_share_a_group():
    """Two unsliced 2 x 2 frames back to back: the second starts at the first's
    origin + max(2, 2) + 1, and its <image> takes the halo one below."""
    prompt = Prompt()
    prompt.text([7])
    for _ in range(2):
        prompt.frame(2, (8, 8), [], 1, 4)
    prompt.text([8])
    positions, delta = _positions(prompt)
    first = [[1] * 6, [0, 1, 1, 2, 2, 3], [0, 1, 2, 1, 2, 3]]
    second = [[4] * 6, [3, 4, 4, 5, 5, 6], [3, 4, 5, 4, 5, 6]]
    expected = [[0, *first[a], *second[a], 7] for a in range(3)]
    assert positions.tolist() == expected
    assert delta == 8 - 14


def test_text_breaks_a_group():
    """Text between two pictures (an image-id tag) gives each its own group; a
    newline alone does not (it is a marker)."""

    def build(between):
        prompt = Prompt()
        prompt.frame(1, (8, 8), [], 1, 4)
        prompt.text(between)
        prompt.frame(1, (8, 8), [], 1, 4)
        return _positions(prompt)[0]

    joined = build([NEWLINE])  # the newline belongs to the first frame, at its origin
    assert joined[:, 6].tolist() == [0, 0, 0]
    assert joined[0, 7:].tolist() == [3] * 6
    split = build([ID_START, 101, ID_END])  # text runs on from the first canvas' next position
    assert split[0, 6:9].tolist() == [3, 4, 5]
    assert split[0, 9:].tolist() == [6] * 6


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.update(ids=[IMAGE] + p["ids"][1:]), "expected <image>"),
        (lambda p: p.update(target_sizes=[[8, 8]] * 2), "target_sizes: expected one (h, w) per image crop (1), got 2"),
        (lambda p: p.update(target_sizes=[[12, 8]]), "expected 3 x 2 = 6 tokens for the thumbnail"),
        (lambda p: p.update(mm_token_type_ids=p["mm_token_type_ids"][:-1]), "mm_token_type_ids: expected one label"),
        (lambda p: p.update(mm_token_type_ids=[3] * len(p["ids"])), "mm_token_type_ids: expected labels 0"),
        (lambda p: p.update(target_sizes=[[8, 8, 1]]), "target_sizes: expected (n, 2) patch grids"),
        (lambda p: p.update(downsample_mode="8x"), "downsample_mode: expected one of 16x, 4x"),
        (lambda p: p.update(ids=[]), "token_ids: expected a non-empty prompt"),
    ],
)
def test_bad_input(edit, message):
    prompt = Prompt()
    prompt.frame(1, (8, 8), [], 1, 4)
    args = {
        "ids": prompt.ids,
        "mm_token_type_ids": prompt.kinds,
        "target_sizes": prompt.sizes[1],
        "downsample_mode": "16x",
    }
    edit(args)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        reference.canvas_prompt_positions(
            CONFIG,
            args["ids"],
            args["mm_token_type_ids"],
            target_sizes=args["target_sizes"],
            downsample_mode=args["downsample_mode"],
        )


def test_no_items_is_plain_text():
    """No crops: every token at its index, delta 0; empty size lists mean none."""
    positions, delta = reference.canvas_prompt_positions(
        CONFIG, [5, NEWLINE, 6], [0, 0, 0], target_sizes=[], target_sizes_videos=np.zeros((0, 2), np.int64)
    )
    assert positions.tolist() == [[0, 1, 2]] * 3
    assert delta == 0


def test_slice_of_another_modality_is_refused():
    prompt = Prompt()
    prompt.frame(1, (8, 8), [], 1, 4)
    prompt.crop(2, (8, 8), 4, SL_START, SL_END)
    with pytest.raises(ValueError, match="mm_token_type_ids: expected the slice at token_ids"):
        _positions(prompt)


def test_missing_marker_id():
    with pytest.raises(TypeError, match="config.newline_id: expected an int token id, got NoneType None"):
        reference.canvas_prompt_positions({**CONFIG, "newline_id": None}, [1], [0])


VECTORS = pathlib.Path(__file__).parent / "data" / "vllm-0.33.0-minicpmv4_7.jsonl"
RECORDS = [json.loads(line) for line in VECTORS.read_text().splitlines()]


@pytest.mark.parametrize("record", RECORDS, ids=[f"vllm-{i}" for i in range(len(RECORDS))])
def test_vllm_vectors(record):
    """With the canvas flag on, vLLM 0.33 gives the reference's positions and
    delta; without it, every token at its index and delta 0 (a divergence:
    transformers 5.24 has no flag and always places the canvas)."""
    sizes = {
        m: [s for item in record["items"] if item["modality"] == m for s in item["target_sizes"]]
        for m in ("image", "video")
    }
    positions, delta = reference.canvas_prompt_positions(
        CONFIG,
        record["token_ids"],
        record["mm_token_type_ids"],
        target_sizes=sizes["image"] or None,
        target_sizes_videos=sizes["video"] or None,
        downsample_mode=record["downsample_mode"],
    )
    if record["uses_mrope_canvas"]:
        assert positions.tolist() == record["positions"]
        assert delta == record["delta"]
    else:
        length = len(record["token_ids"])
        assert record["positions"] == [list(range(length))] * 3
        assert record["delta"] == 0


def test_vllm_vectors_cover_the_layouts():
    """The recorded prompts hold sliced images, sliced and unsliced videos,
    both merge modes, and flagless prompts with pictures (where vLLM differs)."""
    canvas = [r for r in RECORDS if r["uses_mrope_canvas"]]
    assert any(SL_START in r["token_ids"] and 1 in r["mm_token_type_ids"] for r in canvas)
    assert any(SL_START in r["token_ids"] and 2 in r["mm_token_type_ids"] for r in canvas)
    assert any(r["token_ids"].count(IM_START) > 1 and 2 in r["mm_token_type_ids"] for r in canvas)
    assert {r["downsample_mode"] for r in canvas} == {"16x", "4x"}
    assert any(r["items"] and not r["uses_mrope_canvas"] for r in RECORDS)


# --------------------------------------------------------------------------
# transformers 5.24's own get_rope_index
# --------------------------------------------------------------------------

_HAS_MINICPM = importlib.util.find_spec("transformers") is not None and (
    importlib.util.find_spec("transformers.models.minicpmv4_7") is not None
)
needs_minicpm = pytest.mark.skipif(not _HAS_MINICPM, reason="needs transformers 5.24 (MiniCPMV4_7Model)")


def _hf_rope_index(ids, kinds, mask, image_sizes, video_sizes, mode):
    """transformers 5.24's MiniCPMV4_7Model.get_rope_index on a stand-in model
    that holds only the config (the method reads nothing else)."""
    from transformers.models.minicpmv4_7.modeling_minicpmv4_7 import MiniCPMV4_7Model

    stub = types.SimpleNamespace(config=types.SimpleNamespace(**CONFIG))
    stub._group_visual_frames = types.MethodType(MiniCPMV4_7Model._group_visual_frames, stub)
    stub._frame_end_idx = MiniCPMV4_7Model._frame_end_idx
    stub.get_vision_position_ids = types.MethodType(MiniCPMV4_7Model.get_vision_position_ids, stub)

    def sizes(rows):
        return torch.tensor(rows, dtype=torch.int64) if rows else None

    return MiniCPMV4_7Model.get_rope_index(
        stub,
        torch.tensor(ids),
        mm_token_type_ids=torch.tensor(kinds, dtype=torch.int32),
        target_sizes=sizes(image_sizes),
        target_sizes_videos=sizes(video_sizes),
        downsample_mode=mode,
        attention_mask=None if mask is None else torch.tensor(mask),
    )


@needs_minicpm
@settings(max_examples=examples(150))
@given(data=st.data(), mode=st.sampled_from(["16x", "4x"]), batch=st.integers(1, 3), with_mask=st.booleans())
def test_reference_equals_transformers(data, mode, batch, with_mask):
    """The reference, row by row, equals transformers 5.24's get_rope_index on a
    left-padded batch (the processor's padding side); padding sits at 0."""
    merge = reference.CANVAS_MERGE[mode]
    rows = [data.draw(prompts(merge)) for _ in range(batch)]
    width = max(len(p.ids) for p in rows) + (1 if with_mask else 0)
    if not with_mask:
        width = len(rows[0].ids)
        rows = [rows[0]] * batch
    ids = np.zeros((batch, width), np.int64)
    kinds = np.zeros((batch, width), np.int64)
    mask = np.zeros((batch, width), np.int64)
    expected = torch.zeros(3, batch, width, dtype=torch.int64)
    deltas = []
    for b, p in enumerate(rows):
        pad = width - len(p.ids)
        ids[b, pad:], kinds[b, pad:], mask[b, pad:] = p.ids, p.kinds, 1
        positions, delta = _positions(p, mode)
        expected[:, b, pad:] = positions
        deltas.append([delta])
    image_sizes = [s for p in rows for s in p.sizes[1]]
    video_sizes = [s for p in rows for s in p.sizes[2]]
    got, got_deltas = _hf_rope_index(
        ids.tolist(), kinds.tolist(), mask.tolist() if with_mask else None, image_sizes, video_sizes, mode
    )
    assert torch.equal(got, expected)
    assert got_deltas.tolist() == deltas


# --------------------------------------------------------------------------
# The family: MRopeConfig.from_hf_config and the canvas_flag preset switch
# --------------------------------------------------------------------------


def _config(semantics="reference", **fields):
    from mrope_tracker import MRopeConfig

    return MRopeConfig.from_hf_config({"model_type": "minicpmv4_7", **CONFIG, **fields}, semantics=semantics)


def test_config_reads_the_markers_and_mode():
    config = _config(downsample_mode="4x")
    assert config.family == "minicpmv4_7" and config.num_dims == 3
    assert (config.vision_start_token_id, config.vision_end_token_id) == (IM_START, IM_END)
    assert (config.slice_start_token_id, config.slice_end_token_id, config.newline_token_id) == (
        SL_START,
        SL_END,
        NEWLINE,
    )
    assert config.spatial_merge_size == 2 and _config().spatial_merge_size == 4
    # vLLM's names for the image markers, in text_config too
    nested = {k: v for k, v in CONFIG.items() if not k.startswith("image_")}
    from mrope_tracker import MRopeConfig

    config = MRopeConfig.from_hf_config(
        {"model_type": "minicpmv4_7", **nested, "text_config": {"im_start_id": IM_START, "im_end_id": IM_END}}
    )
    assert (config.vision_start_token_id, config.vision_end_token_id) == (IM_START, IM_END)


@pytest.mark.parametrize(
    ("semantics", "fields", "canvas"),
    [
        ("reference", {}, True),
        ("transformers-5", {}, True),
        ("transformers-4.57", {}, True),
        ("vllm-0.33", {}, False),
        ("vllm-0.33", {"uses_mrope_canvas": False}, False),
        ("vllm-0.33", {"uses_mrope_canvas": True}, True),
        ("vllm-0.33", {"mrope_mode": "canvas"}, True),
        ("vllm-0.33", {"mrope_mode": "mrope_canvas_v2"}, True),
        ("vllm-0.33", {"mrope_mode": "default"}, False),
    ],
)
def test_canvas_flag_switch(semantics, fields, canvas):
    """vLLM 0.33 places the canvas only when the config sets its flag (switch
    canvas_flag); transformers 5.24 reads no flag and always does."""
    config = _config(semantics, **fields)
    assert config.canvas is canvas
    assert ("canvas_flag" in config.switches) is (semantics == "vllm-0.33")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"downsample_mode": "8x"}, "config.downsample_mode: expected one of 16x, 4x, got '8x'"),
        ({"uses_mrope_canvas": "yes"}, "config.uses_mrope_canvas: expected a bool, got 'yes'"),
        ({"mrope_mode": 3}, "config.mrope_mode: expected a str, got 3"),
        ({"newline_id": IM_START}, "token ids: expected distinct special token ids"),
        ({"slice_end_id": -1}, "slice_end_token_id: expected an int token id"),
    ],
)
def test_config_bad_fields(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _config(**fields)


def test_config_without_markers_or_mode():
    """No published ids: they stay None (the canvas entry points refuse them);
    a missing downsample_mode falls back to "16x", with a warning."""
    from mrope_tracker.core.config import ConfigDefaultWarning

    with pytest.warns(ConfigDefaultWarning, match="downsample_mode"):
        from mrope_tracker import MRopeConfig

        config = MRopeConfig.from_hf_config({"model_type": "minicpmv4_7"})
    assert config.slice_start_token_id is None and config.spatial_merge_size == 4
