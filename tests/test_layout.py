"""PromptLayout built directly (e.g. after deserialising) is checked before any kernel reads it."""

import struct

import attrs
import numpy as np
import pytest
from hypothesis import given
from strategies import prompts

from mrope_tracker import MRopeConfig, PositionTracker, PromptLayout, prompt_positions
from mrope_tracker.kernels import layout_codes as C

CONFIG = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
IMG, VS, VE = CONFIG.image_token_id, CONFIG.vision_start_token_id, CONFIG.vision_end_token_id
IDS = np.array([1, 2, VS] + [IMG] * 6 + [VE, 3, 4])  # T1 layout


def good_layout() -> PromptLayout:
    return PromptLayout.from_tokens(CONFIG, IDS, image_grid_thw=[[1, 4, 6]])


def rebuilt(rows=None, scales=None, num_tokens=None, delta=None) -> PromptLayout:
    g = good_layout()
    return PromptLayout(
        g.rows if rows is None else rows,
        g.scales if scales is None else scales,
        g.num_tokens if num_tokens is None else num_tokens,
        g.delta if delta is None else delta,
    )


def test_direct_construction_of_a_valid_layout():
    """A layout rebuilt from another's tables gives the same positions, and holds read-only copies."""
    g = good_layout()
    rows = g.rows.copy()
    copy = PromptLayout(rows, g.scales.copy(), g.num_tokens, g.delta)
    rows[:] = 0  # the caller's array is not the layout's
    np.testing.assert_array_equal(copy.positions(), g.positions())
    assert not copy.rows.flags.writeable and not copy.scales.flags.writeable


def _mutated(col, row, value):
    rows = good_layout().rows.copy()
    rows[row, col] = value
    return rows


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(rows=np.zeros((0, C.NUM_COLS), np.int64), scales=np.zeros((0, 2), np.float32)),
            r"rows\[0\]: expected at least one row",
        ),
        (dict(rows=_mutated(C.COL_TOK_START, 1, 4)), r"rows\[1\]: expected rows that tile"),
        (dict(rows=_mutated(C.COL_TOK_LEN, 2, 0)), r"rows\[2\]: expected rows of positive length"),
        (dict(num_tokens=20), r"rows\[2\]: expected rows of positive length ending exactly at num_tokens"),
        (dict(rows=_mutated(C.COL_KIND, 0, 7)), r"rows\[0\]: expected kinds"),
        (dict(rows=_mutated(C.COL_W, 1, 0)), r"rows\[1\]: expected a grid row"),
        (dict(rows=_mutated(C.COL_GRID_OFFSET, 1, 1)), r"rows\[1\]: expected a grid row"),
        (dict(rows=_mutated(C.COL_BASE, 0, -1)), r"rows\[0\]: expected positions"),
        (dict(delta=0), r"delta: expected max position \+ 1 - num_tokens = -3"),
    ],
)
def test_invalid_tables_are_rejected(kwargs, match):
    """Rows that do not tile the prompt, bad kinds or grids, or a wrong delta are a ValueError naming the field."""
    with pytest.raises(ValueError, match=match):
        rebuilt(**kwargs)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(rows=good_layout().rows.astype(np.float64)), TypeError, "rows: expected a int64 array"),
        (dict(rows=good_layout().rows[:, :5]), TypeError, "rows: expected a int64 array"),
        (dict(scales=good_layout().scales.astype(np.float64)), TypeError, "scales: expected a float32 array"),
        (dict(scales=np.zeros((1, 2), np.float32)), ValueError, "scales: expected one row per layout row"),
        (dict(num_tokens=0), ValueError, "num_tokens"),
        (dict(delta=1.5), TypeError, "delta"),
    ],
)
def test_wrong_types_and_shapes(kwargs, error, match):
    """Tables of the wrong dtype or shape, and bad counts, are refused with the field's name."""
    with pytest.raises(error, match=match):
        rebuilt(**kwargs)


def test_tracker_takes_a_checked_layout():
    """add_request_layout with a rebuilt layout gives the same positions as add_request."""
    g = good_layout()
    a = PositionTracker(CONFIG, max_num_reqs=2, max_num_batched_tokens=32)
    a.add_request_layout(
        "r", PromptLayout(g.rows.copy(), g.scales.copy(), g.num_tokens, g.delta), num_computed_tokens=1
    )
    b = PositionTracker(CONFIG, max_num_reqs=2, max_num_batched_tokens=32)
    b.add_request("r", IDS, image_grid_thw=[[1, 4, 6]], num_computed_tokens=1)
    assert a.prepare(["r"], [14]).tolist() == b.prepare(["r"], [14]).tolist()


def _image_layout(config: MRopeConfig) -> PromptLayout:
    ids = [1, config.vision_start_token_id] + [config.image_token_id] * 6 + [config.vision_end_token_id, 2]
    return PromptLayout.from_tokens(config, ids, image_grid_thw=[[1, 4, 6]])


@pytest.mark.parametrize(
    ("built_for", "serving", "match"),
    [
        (
            MRopeConfig(family="qwen2_5_vl"),
            MRopeConfig(family="qwen3_vl", semantics="vllm-0.33"),
            r"layout: built for qwen2_5_vl \(semantics 'reference'\), but this tracker serves qwen3_vl "
            r"\(semantics 'vllm-0.33'\)",
        ),
        (
            MRopeConfig(family="qwen2_5_vl"),
            MRopeConfig(family="qwen2_5_vl", semantics="transformers-5"),
            r"built for qwen2_5_vl \(semantics 'reference'\), but .* qwen2_5_vl \(semantics 'transformers-5'\)",
        ),
        (
            MRopeConfig(family="qwen2_5_vl", tokens_per_second=2),
            MRopeConfig(family="qwen2_5_vl"),
            r"built for qwen2_5_vl \(semantics 'reference', tokens_per_second=2.0\), but .* tokens_per_second=",
        ),
    ],
    ids=["family_and_semantics", "semantics", "parameters"],
)
@pytest.mark.parametrize("travelled", [False, True], ids=["built_here", "from_bytes"])
def test_tracker_refuses_a_layout_built_under_another_config(built_for, serving, match, travelled):
    """A layout built under another family, semantics preset or parameters is a
    ValueError naming both configs, also after to_bytes/from_bytes, and the
    refused call changes nothing."""
    layout = _image_layout(built_for)
    if travelled:
        layout = PromptLayout.from_bytes(layout.to_bytes())
    tracker = PositionTracker(serving, max_num_reqs=2, max_num_batched_tokens=32, layout_rows=1)
    before = tracker.nbytes()
    with pytest.raises(ValueError, match=match):
        tracker.add_request_layout("r", layout)
    assert len(tracker) == 0 and "r" not in tracker and tracker.nbytes() == before
    tracker.check_invariants()
    assert tracker.add_request_layout("r", _image_layout(serving)) == 0  # the same id and slot are still free


def test_tracker_takes_a_layout_of_another_model_type_with_the_same_rules():
    """model_type only names the checkpoint: a Qwen3-VL layout serves a Qwen3-VL-MoE tracker."""
    dense = MRopeConfig(family="qwen3_vl", model_type="qwen3_vl")
    moe = MRopeConfig(family="qwen3_vl", model_type="qwen3_vl_moe")
    tracker = PositionTracker(moe, max_num_reqs=2, max_num_batched_tokens=32)
    tracker.add_request_layout("r", PromptLayout.from_bytes(_image_layout(dense).to_bytes()))
    twin = PositionTracker(dense, max_num_reqs=2, max_num_batched_tokens=32)
    twin.add_request_layout("r", _image_layout(dense))
    assert tracker.prepare(["r"], [10]).tolist() == twin.prepare(["r"], [10]).tolist()


# --------------------------------------------------------------------------
# layouts travel between processes: pickle and to_bytes / from_bytes
# --------------------------------------------------------------------------


@given(prompts())
def test_bytes_and_pickle_round_trip(prompt):
    """to_bytes/from_bytes and pickle give back an equal layout, in O(rows) bytes."""
    import pickle

    layout = PromptLayout.from_tokens(prompt.config, prompt.token_ids, **prompt.kwargs())
    data = layout.to_bytes()
    tables = 36 + layout.num_rows * (8 * C.NUM_COLS + 4 * C.NUM_SCALE_COLS) + 4  # header, tables, checksum
    assert tables < len(data) < tables + 1024  # and the config, in a size of its own
    for back in (PromptLayout.from_bytes(data), pickle.loads(pickle.dumps(layout))):
        np.testing.assert_array_equal(back.rows, layout.rows)
        np.testing.assert_array_equal(back.scales, layout.scales)
        assert (back.num_tokens, back.delta) == (layout.num_tokens, layout.delta)
        assert back.config == layout.config is not None
        np.testing.assert_array_equal(back.positions(), layout.positions())
    # a layout of unknown origin writes no config, and reads back without one
    direct = PromptLayout(layout.rows, layout.scales, layout.num_tokens, layout.delta)
    assert direct.config is None and len(direct.to_bytes()) == tables
    assert PromptLayout.from_bytes(direct.to_bytes()).config is None


@pytest.mark.parametrize(
    ("mangle", "match"),
    [
        (lambda b: b[:-1], "bytes"),
        (lambda b: b[:10], "at least"),
        (lambda b: b"XXXX" + b[4:], "magic"),
        (lambda b: b + b"\0" * 80, "bytes"),
        (lambda b: b[:36] + (7).to_bytes(8, "little") + b[44:], "checksum"),  # first row starts at token 7
        (lambda b: b[:-8] + b"}}}}" + b[-4:], "checksum"),  # the recorded config is not JSON
        (lambda b: b[:4] + b"\x02" + b[5:], "version"),  # a version 2 buffer (no checksum) is not read
        (lambda b: _resealed(b[:36] + (7).to_bytes(8, "little") + b[44:]), "rows"),  # a foreign writer's checksum
        (lambda b: _resealed(b[:-8] + b"}}}}" + b[-4:]), "config"),
    ],
    ids=[
        "truncated",
        "short_header",
        "foreign",
        "extra_row_bytes",
        "bad_row",
        "bad_config",
        "old_version",
        "bad_row_resealed",
        "bad_config_resealed",
    ],
)
def test_bad_bytes_are_refused(mangle, match):
    """A truncated, foreign, damaged or inconsistent buffer is a ValueError naming data, never a layout; one
    whose checksum a foreign writer made right is still checked (rows, config)."""
    with pytest.raises(ValueError, match=f"data: .*{match}"):
        PromptLayout.from_bytes(mangle(good_layout().to_bytes()))


def _resealed(data: bytes) -> bytes:
    """`data` with its checksum recomputed, as a writer other than to_bytes would make it."""
    import zlib

    return data[:-4] + zlib.crc32(data[:-4]).to_bytes(4, "little")


def test_a_resealed_config_nested_past_pythons_recursion_limit_is_refused():
    """json raises RecursionError on deep nesting: it is a ValueError naming data like any unreadable config."""
    data = good_layout().to_bytes()
    header = struct.Struct("<4sB3xqqqI")
    magic, version, num_tokens, delta, num_rows, length = header.unpack_from(data)
    nested = b"[" * 100_000 + b"]" * 100_000
    body = header.pack(magic, version, num_tokens, delta, num_rows, len(nested)) + data[header.size : -4 - length]
    with pytest.raises(ValueError, match="data: .*config"):
        PromptLayout.from_bytes(_resealed(body + nested + b"\0\0\0\0"))


def test_from_bytes_wants_bytes():
    """from_bytes of a non-bytes value is a TypeError naming data."""
    with pytest.raises(TypeError, match="data"):
        PromptLayout.from_bytes("MRLY")


# --------------------------------------------------------------------------
# checked ranges: from_ranges(..., token_ids=...)
# --------------------------------------------------------------------------


def test_checked_ranges_accept_matching_tokens():
    """Ranges that match the tokens build the same layout as without the check."""
    kwargs = dict(image_ranges=[(3, 6)], image_grid_thw=[[1, 4, 6]])
    checked = PromptLayout.from_ranges(CONFIG, len(IDS), token_ids=IDS, **kwargs)
    np.testing.assert_array_equal(checked.rows, PromptLayout.from_ranges(CONFIG, len(IDS), **kwargs).rows)


def test_checked_ranges_name_the_item_and_counts():
    """A range that does not cover its placeholders names the item, the expected and the found count."""
    with pytest.raises(ValueError, match=r"image_ranges\[0\]: expected 6 image tokens .* found 5"):
        PromptLayout.from_ranges(CONFIG, len(IDS), image_ranges=[(2, 6)], image_grid_thw=[[1, 4, 6]], token_ids=IDS)


# --------------------------------------------------------------------------
# per-frame videos in the range form: frames located from is_embed
# --------------------------------------------------------------------------

QWEN3 = MRopeConfig(family="qwen3_vl")
Q_VS, Q_VE, Q_V = QWEN3.vision_start_token_id, QWEN3.vision_end_token_id, QWEN3.video_token_id
# t VS <ts ts VS V*4 VE ts ts VS V*4 VE> VE t: a (2, 4, 4) video as vLLM's range covers it
Q_IDS = np.array([1, Q_VS, 7, 8, Q_VS] + [Q_V] * 4 + [Q_VE, 7, 9, Q_VS] + [Q_V] * 4 + [Q_VE, Q_VE, 2])
Q_MASK = [False] * 3 + [True] * 4 + [False] * 4 + [True] * 4 + [False]


@pytest.mark.parametrize(
    "form", [list, np.array, lambda m: __import__("torch").tensor(m)], ids=["list", "numpy", "tensor"]
)
def test_frames_from_is_embed(form):
    """A Qwen3-VL video range spanning its frames and timestamps, with is_embed in any form, equals the token form."""
    tokens = PromptLayout.from_tokens(QWEN3, Q_IDS, video_grid_thw=[[2, 4, 4]])
    ranges = PromptLayout.from_ranges(
        QWEN3, len(Q_IDS), video_ranges=[(2, 16, form(Q_MASK))], video_grid_thw=[[2, 4, 4]]
    )
    np.testing.assert_array_equal(ranges.rows, tokens.rows)
    assert ranges.delta == tokens.delta


@pytest.mark.parametrize(
    ("video_range", "match"),
    [
        ((2, 16, Q_MASK[:-1]), "mask of the range's length"),
        ((2, 16, [False] * 16), "found 0 before"),
        ((2, 16, [False] * 3 + [True] * 3 + [False] * 5 + [True] * 4 + [False]), "found 0 before"),
        ((2, 16, Q_MASK[:-1] + [True]), "found 2 before"),
        ((2, 6, [False] + [True] * 4 + [False]), "exactly 2 frames of 4 embedding tokens, found 1 before"),
        ((2, 16), "without is_embed"),
        ((2, 16, ["x"] * 16), "bool mask"),
    ],
    ids=["mask_length", "no_frames", "short_frame", "extra_tokens", "range_short_of_frames", "no_mask", "not_bool"],
)
def test_bad_frame_masks(video_range, match):
    """A mask that does not mark exactly t frames of h'w' tokens is a ValueError or TypeError naming video_ranges."""
    with pytest.raises((ValueError, TypeError), match=match):
        PromptLayout.from_ranges(QWEN3, len(Q_IDS), video_ranges=[video_range], video_grid_thw=[[2, 4, 4]])


def test_frames_back_to_back_in_one_run():
    """Frames with no text between them form one run of the mask, split into frames."""
    ids = np.array([1, Q_VS] + [Q_V] * 8 + [Q_VE, 2])
    tokens = PromptLayout.from_tokens(QWEN3, ids, video_grid_thw=[[2, 4, 4]])
    ranges = PromptLayout.from_ranges(
        QWEN3, len(ids), video_ranges=[(1, 10, [False] + [True] * 8 + [False])], video_grid_thw=[[2, 4, 4]]
    )
    np.testing.assert_array_equal(ranges.rows, tokens.rows)


def test_checked_interleave_order():
    """With token_ids, an audio-in-video range whose layout is not the named convention's is a ValueError."""
    config = MRopeConfig(family="qwen2_5_omni", tokens_per_second=2, seconds_per_chunk=2)  # chunk C = 4
    v, a = config.video_token_id, config.audio_token_id
    block = [v] * 4 + [a] * 4 + [v] * 4 + [a] * 2  # video (4, 2, 4), sp 1: transformers' layout
    ids = [
        1,
        config.vision_start_token_id,
        config.audio_start_token_id,
        *block,
        config.audio_end_token_id,
        config.vision_end_token_id,
        2,
    ]
    kwargs = dict(
        video_grid_thw=[[4, 2, 4]], second_per_grid_ts=[1.0], audio_feature_lengths=[24], use_audio_in_video=True
    )
    layout = PromptLayout.from_ranges(config, len(ids), video_ranges=[(3, 14)], token_ids=ids, **kwargs)
    np.testing.assert_array_equal(layout.positions(), PromptLayout.from_tokens(config, ids, **kwargs).positions())
    swapped = ids[:3] + [a] * 4 + [v] * 8 + [a] * 2 + ids[-3:]
    with pytest.raises(ValueError, match=r"video_ranges\[0\]: the interleave convention"):
        PromptLayout.from_ranges(config, len(ids), video_ranges=[(3, 14)], token_ids=swapped, **kwargs)


def test_unclosed_video_bracket_message():
    """A GLM prompt that ends inside a begin_of_video bracket with every video used names the bracket."""
    glm = MRopeConfig(family="glm4v")
    ids = [1, glm.video_start_token_id, 2]
    with pytest.raises(ValueError, match="bracket"):
        PromptLayout.from_tokens(glm, ids)
    with pytest.raises(ValueError, match="bracket"):
        prompt_positions(glm, ids)
    with pytest.raises(ValueError, match="interleave"):
        PromptLayout.from_ranges(MRopeConfig(family="qwen2_5_omni", semantics="vllm-0.33"), 5, interleave="nonsense")


def test_layout_tables_stay_read_only_and_fill_from_one_signature():
    """`rows` and `scales` are read-only to users, while the fill kernel is
    handed the writable tables behind them: the step kernel calls it with
    its writable pool, and one signature is one compilation (a read-only
    array is a type of its own in numba)."""
    from mrope_tracker.kernels.layout_fill import fill_positions

    config = MRopeConfig(family="qwen2_5_vl")
    ids = [1, config.vision_start_token_id, config.image_token_id, config.image_token_id, config.vision_end_token_id, 2]
    built = PromptLayout.from_tokens(config, ids, image_grid_thw=[[1, 2, 4]])
    direct = PromptLayout(built.rows, built.scales, built.num_tokens, built.delta)
    for layout in (built, direct, PromptLayout.from_bytes(built.to_bytes())):
        assert not layout.rows.flags.writeable and not layout.scales.flags.writeable
        with pytest.raises(ValueError):
            layout.rows[0, 0] = 7
        out = np.zeros((3, 8), np.int64)
        layout.write_positions(out, 1, 0, 6)
        assert layout.positions().tolist() == built.positions().tolist() == out[:, 1:7].tolist()
    tables = [signature[2:4] for signature in fill_positions.signatures]
    assert tables and all(rows.mutable and scales.mutable for rows, scales in tables)


def test_layout_attrs_fields_are_its_public_ones():
    """asdict, astuple and evolve see rows, scales, num_tokens, delta and config
    (the writable tables behind the read-only views stay private), and a
    layout rebuilt from its own fields is the same layout, checked, under the same config."""
    config = MRopeConfig(family="qwen2_5_vl")
    ids = [1, config.vision_start_token_id, config.image_token_id, config.image_token_id, config.vision_end_token_id, 2]
    layout = PromptLayout.from_tokens(config, ids, image_grid_thw=[[1, 2, 4]])
    fields = attrs.asdict(layout, recurse=False)
    assert list(fields) == ["rows", "scales", "num_tokens", "delta", "config"]
    assert not any(value.flags.writeable for value in (fields["rows"], fields["scales"]))
    *tables, config = attrs.astuple(layout, recurse=False)
    for rebuilt in (
        PromptLayout(**fields),
        PromptLayout(*tables, config=config),
        attrs.evolve(layout, delta=layout.delta),
    ):
        assert rebuilt.positions().tolist() == layout.positions().tolist()
        assert rebuilt.config is config
