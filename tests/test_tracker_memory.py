"""PositionTracker memory: fixed buffers in the step path, no growth over many steps, O(items) state."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

from mrope_tracker import MRopeConfig, PromptLayout
from mrope_tracker.tracker import PositionTracker

CONFIG = MRopeConfig(family="qwen2_vl")
TEXT = 1000


def image_prompt(num_images: int, text: int = 3) -> tuple[np.ndarray, dict]:
    """Token ids and kwargs of `num_images` 2x2-placeholder images, each wrapped and followed by `text` tokens."""
    c = CONFIG
    ids = [TEXT]
    for _ in range(num_images):
        ids += [c.vision_start_token_id] + [c.image_token_id] * 4 + [c.vision_end_token_id] + [TEXT] * text
    kwargs = {"image_grid_thw": [[1, 4, 4]] * num_images} if num_images else {}
    return np.array(ids, np.int64), kwargs


def text_prompt(length: int) -> np.ndarray:
    return np.full(length, TEXT, np.int64)


def addresses(tracker: PositionTracker) -> dict:
    """Addresses of every buffer the step path touches."""
    out = {
        "positions": tracker.positions.data_ptr(),
        "slot_state": tracker.slot_state.ctypes.data,
        "pool_rows": tracker.pool_rows.ctypes.data,
        "pool_scales": tracker.pool_scales.ctypes.data,
    }
    for k, buf in enumerate(tracker.buffers.host_buffers()):
        out[f"host{k}"] = buf.data_ptr()
    return out


def full_tracker(num_reqs: int = 64, max_num_batched_tokens: int = 2048, **kwargs) -> PositionTracker:
    """`num_reqs` multimodal requests (1..4 images each), admitted, nothing computed yet."""
    tracker = PositionTracker(CONFIG, max_num_reqs=num_reqs, max_num_batched_tokens=max_num_batched_tokens, **kwargs)
    for rid in range(num_reqs):
        ids, kw = image_prompt(1 + rid % 4, text=1 + rid % 5)
        tracker.add_request(rid, ids, **kw)
    return tracker


def prefill_all(tracker: PositionTracker, ids: list) -> None:
    tracker.prepare(ids, [tracker.prompt_len(rid) for rid in ids])


# --- addresses --------------------------------------------------------------------


@pytest.mark.parametrize("staging", [False, True])
def test_step_buffers_keep_their_addresses(staging):
    """Over thousands of prefill, decode, draft and rollback steps, outputs view tracker.positions and no buffer
    moves."""
    tracker = full_tracker(staging=staging, num_staging_buffers=3)
    ids = list(range(64))
    slots = np.array([tracker.slot(rid) for rid in ids], np.int64)
    positions = tracker.positions
    before = addresses(tracker)
    # prefill in chunks of 7 tokens per request
    for _ in range(6):
        out = tracker.prepare(ids, [7] * 64)
        assert out.data_ptr() == before["positions"] and out.shape == (3, 7 * 64)
    ones, fours = np.ones(64, np.int64), np.full(64, 4, np.int64)
    for step in range(3000):
        if step % 3 == 0:
            out = tracker.prepare(ids, [1] * 64)
        elif step % 3 == 1:
            out = tracker.prepare_slots(slots, ones)
        else:
            out = tracker.prepare_slots(slots, fours)  # one token plus three drafts
            for rid in ids[step % 5 :: 5]:
                tracker.rollback(rid, 3)
        assert out.data_ptr() == before["positions"]
        assert out.untyped_storage().data_ptr() == positions.untyped_storage().data_ptr()
        if step % 100 == 0:
            assert addresses(tracker) == before
    assert tracker.positions is positions and addresses(tracker) == before


def test_rejected_steps_keep_addresses():
    """Rejected steps move no buffer either."""
    tracker = full_tracker(num_reqs=8)
    before = addresses(tracker)
    for _ in range(200):
        with pytest.raises(ValueError):
            tracker.prepare([0, 1, 0], [1, 1, 1])
        with pytest.raises(ValueError):
            tracker.prepare([0, 1], [1, 5000])
        tracker.prepare([0, 1], [1, 1])
    assert addresses(tracker) == before


# --- no growth ---------------------------------------------------------------------


def _traced_after(run, num_steps: int) -> int:
    run(num_steps)
    return tracemalloc.get_traced_memory()[0]


@pytest.mark.parametrize("entry", ["prepare", "prepare_slots"])
def test_no_memory_growth_over_decode_steps(entry):
    """5,000 decode steps of 64 requests: traced Python memory does not grow with the number of steps."""
    tracker = full_tracker(max_model_len=100_000)
    ids = list(range(64))
    prefill_all(tracker, ids)
    slots = np.array([tracker.slot(rid) for rid in ids], np.int64)
    counts_list, counts_array = [1] * 64, np.ones(64, np.int64)

    def run(num_steps: int) -> None:
        if entry == "prepare":
            for _ in range(num_steps):
                tracker.prepare(ids, counts_list)
        else:
            for _ in range(num_steps):
                tracker.prepare_slots(slots, counts_array)

    run(200)  # warm up: kernels loaded, caches filled
    tracemalloc.start()
    try:
        base = _traced_after(run, 200)
        after_1k = _traced_after(run, 1000)
        after_5k = _traced_after(run, 4000)
    finally:
        tracemalloc.stop()
    # a constant slack for interpreter caches; a leak of even 2 bytes per step would exceed it over 4,000 steps
    assert after_1k - base < 8192, (base, after_1k)
    assert after_5k - after_1k < 8192, (after_1k, after_5k)
    assert tracker.num_computed_tokens(0) == tracker.prompt_len(0) + 5400


def test_large_step_makes_no_token_sized_temporaries():
    """A 2,048-token prefill step's traced peak stays far below one (3, 2048) int64 array."""
    tracker = PositionTracker(CONFIG, max_num_reqs=4, max_num_batched_tokens=2048)
    for rid in range(4):
        ids, kw = image_prompt(60, text=30)
        tracker.add_request(rid, ids, **kw)
    tracker.prepare([0, 1, 2, 3], [1, 1, 1, 1])  # warm up
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = tracker.prepare([0, 1, 2, 3], [512, 512, 512, 512])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.shape == (3, 2048)
    assert peak - base < 3 * 2048 * 8 // 4, peak - base


def _step_peak(call) -> int:
    """Traced bytes a call holds at its peak beyond what was held before it (tracemalloc must be on).
    numpy reports every array's data to tracemalloc, so an array made inside the call counts in full."""
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    call()
    return tracemalloc.get_traced_memory()[1] - before


@pytest.mark.parametrize("with_computed", [False, True])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_prepare_slots_index_arrays_allocate_nothing(dtype, with_computed):
    """prepare_slots with int32 or int64 arrays (and computed counts) makes no array: each step's traced peak stays
    far below one int64 copy of its 4,096-entry batch, and 3,000 steps leave traced memory where it was."""
    num_reqs = 4096
    tracker = PositionTracker(CONFIG, max_num_reqs=num_reqs, max_num_batched_tokens=8192)
    for rid in range(num_reqs):
        tracker.add_request_from_ranges(rid, 10, num_computed_tokens=10)
    slots = np.array([tracker.slot(rid) for rid in range(num_reqs)], dtype)[::-1].copy()
    counts = np.ones(num_reqs, dtype)
    computed = np.full(num_reqs, 20, dtype) if with_computed else None  # the same decode step every time
    for _ in range(50):  # warm up: kernels loaded, views cached
        tracker.prepare_slots(slots, counts, computed)
    one_copy = num_reqs * 8  # an int64 copy of the slots, or of the counts
    tracemalloc.start()
    try:
        # the probe sees an array made in the call (it would catch a per-step conversion)
        assert _step_peak(lambda: np.asarray(slots, np.int64) + 0) >= one_copy
        peaks = [_step_peak(lambda: tracker.prepare_slots(slots, counts, computed)) for _ in range(200)]
        start = tracemalloc.get_traced_memory()[0]
        for _ in range(3000):
            tracker.prepare_slots(slots, counts, computed)
        growth = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert max(peaks) < one_copy // 8, max(peaks)
    assert growth < 4096, growth
    expected = 21 if with_computed else 10 + 3250
    assert tracker.num_computed_tokens(0) == expected


def test_index_arrays_reach_the_kernel_uncopied():
    """int32 and int64 arrays go to the step kernel as they are: the tracker's conversion buffers are never written."""
    tracker = PositionTracker(CONFIG, max_num_reqs=8, max_num_batched_tokens=64)
    for rid in range(8):
        tracker.add_request_from_ranges(rid, 5)
    buffers = (tracker._slot_args, tracker._batch_counts, tracker._batch_computed)
    for buf in buffers:
        buf[:] = -7
    for dtype in (np.int32, np.int64):
        slots = np.arange(8, dtype=dtype)[::-1].copy()
        out = tracker.prepare_slots(slots, np.full(8, 2, dtype), np.full(8, 3, dtype))
        assert out.shape == (3, 16)
    assert all((buf == -7).all() for buf in buffers)
    tracker.prepare_slots(np.arange(8, dtype=np.int32), np.full(8, 2, np.int64))  # mixed dtypes: converted
    assert (tracker._slot_args == np.arange(8)).all()


def test_no_argument_form_compiles_a_new_kernel():
    """Once int32 and int64 steps ran, no other argument form makes numba compile another step kernel."""
    from mrope_tracker.kernels import records
    from mrope_tracker.kernels import tracker_step as K

    tracker = PositionTracker(CONFIG, max_num_reqs=4, max_num_batched_tokens=64)
    for rid in range(4):
        tracker.add_request_from_ranges(rid, 5)
    for dtype in (np.int32, np.int64):
        tracker.prepare_slots(np.array([0, 1], dtype), np.array([1, 1], dtype), np.array([1, 1], dtype))
    tracker.prepare([0, 1], [1, 1], num_computed_tokens=[2, 2])
    kernels = (K.prepare_step, records.read_int_records)
    compiled = [set(k.signatures) for k in kernels]
    readonly = np.array([0, 1])
    readonly.flags.writeable = False
    for slots in (
        readonly,
        np.arange(4)[::2],
        np.array([0, 1], np.uint16),
        np.array([0, 1], ">i8"),
        torch.tensor([0, 1]),
        [0, 1],
        (0, 1),
    ):
        tracker.prepare_slots(slots, [1, 1], np.array([3, 3], np.int16))
        tracker.prepare((0, 1), np.array([1, 1], np.int32), num_computed_tokens=torch.tensor([3, 3], dtype=torch.int32))
    assert [set(k.signatures) for k in kernels] == compiled


# --- per-request state ---------------------------------------------------------------


@pytest.mark.parametrize("form", ["tokens", "ranges", "layout"])
def test_state_independent_of_prompt_length(form):
    """A 1K-token and a 100K-token text prompt hold the same bytes of state."""
    tracker = PositionTracker(CONFIG, max_num_reqs=2, max_num_batched_tokens=64)
    for rid, length in (("short", 1_000), ("long", 100_000)):
        if form == "tokens":
            tracker.add_request(rid, text_prompt(length))
        elif form == "ranges":
            tracker.add_request_from_ranges(rid, length)
        else:
            tracker.add_request_layout(rid, PromptLayout.from_ranges(CONFIG, length))
    assert tracker.state_nbytes("short") == tracker.state_nbytes("long") < 1024
    assert tracker.prompt_len("long") == 100_000


def test_state_grows_with_items_not_text():
    """State grows with the number of images, and long text between them adds nothing."""
    tracker = PositionTracker(CONFIG, max_num_reqs=4, max_num_batched_tokens=64)
    for rid, (num_images, text) in {"one": (1, 3), "ten": (10, 3), "ten_long": (10, 5_000), "none": (0, 3)}.items():
        ids, kw = image_prompt(num_images, text)
        tracker.add_request(rid, ids, **kw)
    one, ten, none = tracker.state_nbytes("one"), tracker.state_nbytes("ten"), tracker.state_nbytes("none")
    assert none < one < ten
    assert tracker.state_nbytes("ten_long") == ten
    # linear in items: nine more images cost nine times what the first one added, at most
    assert ten - one <= 9 * 2 * (one - none) + 1


def test_long_prompt_does_not_grow_pool():
    """Admitting a 100K-token text prompt leaves every buffer the size a 1K-token prompt does."""
    sizes = []
    for length in (1_000, 100_000):
        tracker = PositionTracker(CONFIG, max_num_reqs=4, max_num_batched_tokens=64)
        tracker.add_request("r", text_prompt(length))
        tracker.prepare(["r"], [64])
        sizes.append(tracker.nbytes())
    assert sizes[0] == sizes[1]


def test_nbytes_independent_of_max_model_len():
    """nbytes() is the same whatever max_model_len, and matches the actual buffers."""
    reports = []
    for max_model_len in (None, 1_000, 10_000_000):
        tracker = PositionTracker(CONFIG, max_num_reqs=16, max_num_batched_tokens=256, max_model_len=max_model_len)
        report = tracker.nbytes()
        assert report["device_positions"] == tracker.positions.numel() * tracker.positions.element_size() == 3 * 257 * 8
        assert report["slot_state"] == tracker.slot_state.nbytes
        assert report["layout_pool"] == tracker.pool_rows.nbytes + tracker.pool_scales.nbytes
        reports.append(report)
    assert reports[0] == reports[1] == reports[2]
    assert sum(reports[2].values()) < 64 * 1024


def test_nbytes_int32_halves_positions():
    """An int32 tracker's position buffer is half the int64 one."""
    wide = PositionTracker(CONFIG, max_num_reqs=4, max_num_batched_tokens=100)
    narrow = PositionTracker(CONFIG, max_num_reqs=4, max_num_batched_tokens=100, dtype=torch.int32)
    assert narrow.nbytes()["device_positions"] * 2 == wide.nbytes()["device_positions"]
