"""RopeState (MRV2's M-RoPE state on the device) against PositionTracker and the table design.

Without a GPU the Triton kernels run in triton's interpreter on CPU tensors
(TRITON_INTERPRET=1, set below before triton is imported); with one, on the
GPU. The interpreter is slow, so the cases are small: few slots, short
prompts, and a small kernel block (16 tokens) so that a chunk spans several
blocks. Skipped when triton is missing or older than the interpreter these
tests need (3.0).
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from triton_support import require_triton  # noqa: E402

require_triton(module_level=True)

import json  # noqa: E402

import attrs  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rope_sim import SENTINEL, Harness  # noqa: E402
from strategies import configs, examples, prompts  # noqa: E402
from vllm_features import VECTORS, TokenBuffer, vector_features, vllm_config  # noqa: E402

from mrope_tracker import MRopeConfig, PromptLayout  # noqa: E402
from mrope_tracker.device.evs_rows import PrunedRopeState  # noqa: E402
from mrope_tracker.device.factory import get_rope_state, planned_nbytes  # noqa: E402
from mrope_tracker.device.rope_state import RopeState  # noqa: E402
from mrope_tracker.device.rows import NUM_DEVICE_COLS, device_rows  # noqa: E402
from mrope_tracker.families import SEMANTICS  # noqa: E402
from mrope_tracker.vllm import layout_from_features  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BLOCK = 16
EVS_PATH = os.path.join(os.path.dirname(__file__), "data", "vllm-0.33.0-evs.jsonl")


def layout_of(prompt, num_tokens=None) -> PromptLayout:
    """The prompt's layout, over `num_tokens` tokens (more than the prompt: generated tokens after it)."""
    return PromptLayout.from_ranges(prompt.config, num_tokens or prompt.num_tokens, **prompt.range_kwargs())


def index_tensors(slots, qsl, prefill, computed):
    def t(values, dtype):
        return torch.tensor(values, dtype=dtype, device=DEVICE)

    return t(slots, torch.int64), t(qsl, torch.int32), t(prefill, torch.int32), t(computed, torch.int32)


# ---------------------------------------------------------------- recorded vLLM 0.33 vectors

SAMPLE = [
    index
    for family in sorted({v["family"] for v in VECTORS})
    for index in [k for k, v in enumerate(VECTORS) if v["family"] == family][:2]
]


# the prompt ids as vLLM 0.33's scheduler hands them (a list) and as 0.34's does (an int32 TokenBuffer), by turns
IDS_FORMS = [list if k % 2 else TokenBuffer for k in range(len(SAMPLE))]


@pytest.mark.parametrize(
    ("index", "ids_form"),
    list(zip(SAMPLE, IDS_FORMS)),
    ids=[f"{i:03d}-{VECTORS[i]['family']}-{form.__name__}" for i, form in zip(SAMPLE, IDS_FORMS)],
)
def test_recorded_vectors(index, ids_form):
    """init_prefill_positions from vLLM's features, then one prefill step and one
    read: vLLM 0.33.0's own positions, bit for bit; a decode token after them."""
    vector = VECTORS[index]
    config = vllm_config(vector)
    n = len(vector["token_ids"])
    state = RopeState(3, 4, n + 8, n + 64, DEVICE, block_size=1024)
    state.init_prefill_positions(2, config, ids_form(vector["token_ids"]), vector_features(vector))
    state.apply_staged_writes()
    idx, qsl, prefill, computed = index_tensors([2], [0, n], [0, 0, n, 0], [0, 0, 0, 0])
    state.prepare_positions(idx, qsl, prefill, computed)
    assert state.get_positions(n).cpu().tolist() == vector["positions"]
    assert state.read_prefill_positions(2, n).cpu().tolist() == vector["positions"]
    idx, qsl, prefill, computed = index_tensors([2], [0, 1], [0, 0, n, 0], [0, 0, n + 3, 0])
    state.prepare_positions(idx, qsl, prefill, computed)
    assert state.get_positions(1).cpu().tolist() == [[n + 3 + vector["delta"]]] * 3
    # resumed after preemption: the prompt and 3 generated tokens as one prefill, 2 of them cached
    state.init_prefill_positions(0, config, vector["token_ids"] + [11, 12, 13], vector_features(vector))
    state.apply_staged_writes()  # the runner's call, before the step
    idx, qsl, prefill, computed = index_tensors([0], [0, n + 1], [n + 3, 0, n, 0], [2, 0, 0, 0])
    state.prepare_positions(idx, qsl, prefill, computed)
    generated = [n + k + vector["delta"] for k in range(3)]
    assert state.get_positions(n + 1).cpu().tolist() == [row[2:] + generated for row in vector["positions"]]


def test_model_config_is_read_once_per_model():
    """A vLLM model's .config is read once per model object, under vllm-0.33 unless told otherwise."""
    vector = next(v for v in VECTORS if v["family"] == "qwen2_5_vl" and v["video_grid_thw"])

    class Model:
        reads = 0

        @property
        def config(self):
            Model.reads += 1
            return vector["config"]

    model = Model()
    state = RopeState(3, 2, 64, 4096, DEVICE)
    n = len(vector["token_ids"])
    for slot in (0, 1, 0):
        state.init_prefill_positions(slot, model, vector["token_ids"], vector_features(vector))
    assert Model.reads == 1
    assert state.read_prefill_positions(0, n).cpu().tolist() == vector["positions"]
    other = RopeState(3, 2, 64, 4096, DEVICE, semantics="reference")
    other.init_prefill_positions(0, Model(), vector["token_ids"], vector_features(vector))
    assert Model.reads == 2
    assert other._config_of(model).semantics == "reference"  # noqa: SLF001


# ---------------------------------------------------------------- scheduler runs


@st.composite
def scheduler_runs(draw):
    config = attrs.evolve(draw(configs()), semantics=draw(st.sampled_from(SEMANTICS)))
    requests = draw(st.lists(prompts(config, max_items=3, max_text=8), min_size=1, max_size=4))
    return config, requests


def _device_rows_needed(layout) -> int:
    rows, taus = device_rows(layout.rows, layout.scales)
    return rows.shape[0] + -(-taus.shape[0] // NUM_DEVICE_COLS)


@settings(max_examples=examples(25, minimum=4))
@given(scheduler_runs(), st.data())
def test_scheduler_runs(run, data):
    """Random MRV2-like runs: chunked prefill splitting items, prefix-cache hits,
    decode, speculative steps whose accepted counts send num_computed_tokens
    back, preemption and resumption with generated tokens, slot reuse, an
    unsorted idx_mapping and CUDA-graph padding: RopeState equals
    PositionTracker and the table design at every step, under every preset."""
    config, requests = run
    max_num_reqs, budget = 3, 48
    # a pool of 64 rows (compaction runs often) unless one request alone needs more (an Omni
    # audio-in-video prompt can): every slot must fit the largest one, or the pool refuses by design
    largest = max(_device_rows_needed(layout_of(p)) for p in requests)
    # the kernel's shape: one block of 16 or 32 lanes, its prompt tokens positioned 16 at a time or all at once
    block = data.draw(st.sampled_from([BLOCK, 2 * BLOCK]), label="block_size")
    shape = {"block_size": block, "prompt_block": data.draw(st.sampled_from([BLOCK, block]), label="prompt_block")}
    h = Harness(config, max_num_reqs, budget, 512, DEVICE, max_num_rows=max(64, 3 * largest), **shape)
    waiting = list(range(len(requests)))
    running: dict[int, dict] = {}  # slot -> request state
    draw = data.draw
    for _ in range(draw(st.integers(2, 8))):
        free = [s for s in range(max_num_reqs) if s not in running]
        while waiting and free:
            slot = free.pop(draw(st.integers(0, len(free) - 1)))
            prompt = requests[waiting.pop(0)]
            cached = draw(st.integers(0, prompt.num_tokens - 1)) if draw(st.booleans()) else 0
            h.admit(slot, layout_of(prompt), cached)
            running[slot] = {"prompt": prompt, "generated": 0}
        if not running:
            break
        order = draw(st.permutations(sorted(running)))
        entries, total, drafts = [], 0, {}
        for slot in order:
            done, prefill = int(h.num_computed[slot]), int(h.prefill_len[slot])
            room = budget - total
            if room <= 0:
                break
            if done < prefill:
                count = draw(st.integers(1, min(prefill - done, room)))
            else:
                drafts[slot] = draw(st.integers(0, min(3, room - 1)))
                count = 1 + drafts[slot]
            entries.append((slot, count))
            total += count
        if not entries:
            break
        h.step(entries, pad_reqs=draw(st.integers(0, 2)), pad_tokens=draw(st.integers(0, budget - total + 1)))
        for slot, count in entries:
            if slot in drafts:  # one sampled token, then the accepted drafts
                accepted = 1 + draw(st.integers(0, drafts[slot]))
                h.num_computed[slot] += accepted
                running[slot]["generated"] += accepted
            else:
                h.num_computed[slot] += count
        for slot in list(running):
            request = running[slot]
            if h.num_computed[slot] >= h.prefill_len[slot] and draw(st.integers(0, 5)) == 0:
                if draw(st.booleans()):  # preempted, then resumed with its generated tokens as prefill
                    prompt = request["prompt"]
                    num_tokens = prompt.num_tokens + request["generated"]
                    cached = draw(st.integers(0, num_tokens - 1)) if draw(st.booleans()) else 0
                    h.admit(slot, layout_of(prompt, num_tokens), cached)
                else:  # finished: MRV2 tells RopeState nothing; the slot is reused later
                    h.finish(slot)
                    del running[slot]
        h.state.check_invariants()


def test_chunks_that_cross_the_prompt_end():
    """A chunk may run past the rows (index + delta there) whatever prefill_lens says: the
    per-token rule of PositionTracker (the table design has no rows there to compare)."""
    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2, semantics="vllm-0.33")
    # the prompt ends inside a video: its last token is no index + delta
    layout = PromptLayout.from_ranges(config, 30, video_ranges=[(14, 16)], video_grid_thw=[[4, 4, 4]])
    assert (layout.positions(29, 30)[:, 0] != 29 + layout.delta).any()
    h = Harness(config, 2, 64, 128, DEVICE, block_size=BLOCK)
    h.admit(1, layout)
    h.step([(1, 20)])
    h.num_computed[1] = 20
    h.step([(1, 20)], check_table=False)
    for start in (13, 14, 28):  # a kernel block whose first token is the prompt's last, or past it
        h.num_computed[1] = start
        h.step([(1, 30 - start)])
        h.step([(1, 30 - start + 17)], check_table=False)


# ---------------------------------------------------------------- kernel edges


def _state_with_a_request(**kwargs):
    config = MRopeConfig(family="qwen2_vl", semantics="vllm-0.33")
    layout = PromptLayout.from_ranges(config, 20, image_ranges=[(2, 12)], image_grid_thw=[[1, 6, 8]])
    state = RopeState(3, 4, 32, 64, DEVICE, config=config, block_size=BLOCK, **kwargs)
    state.init_prefill_layout(1, layout)
    state.apply_staged_writes()
    return state, layout


def test_bad_slots_and_queries_past_the_buffer_write_nothing_out_of_bounds():
    """What the caller guarantees, broken: a slot outside [0, max_num_reqs) writes nothing;
    a query running past the buffer is cut at its last column."""
    state, layout = _state_with_a_request()
    state.positions.fill_(SENTINEL)
    idx, qsl, prefill, computed = index_tensors([-1, 1, 9], [0, 5, 10, 15], [0, 20, 0, 0], [0, 0, 0, 0])
    state.prepare_positions(idx, qsl, prefill, computed)
    got = state.positions.cpu()
    assert (got[:, :5] == SENTINEL).all() and (got[:, 10:] == SENTINEL).all()
    assert torch.equal(got[:, 5:10], torch.from_numpy(layout.positions(0, 5)))
    idx, qsl, prefill, computed = index_tensors([1], [30, 60], [0, 20, 0, 0], [0, 0, 0, 0])
    state.prepare_positions(idx, qsl, prefill, computed)
    assert torch.equal(state.positions.cpu()[:, 30:33], torch.from_numpy(layout.positions(0, 3)))


def test_a_slot_never_admitted_gives_index_positions():
    """A dummy run (profiling, CUDA-graph capture) on slots no request holds: index + 0."""
    state, _ = _state_with_a_request()
    idx, qsl, prefill, computed = index_tensors([0, 3], [0, 2, 4], [0, 0, 0, 0], [0, 0, 0, 7])
    state.prepare_positions(idx, qsl, prefill, computed)
    assert state.get_positions(4).cpu().tolist() == [[0, 1, 7, 8]] * 3


# ---------------------------------------------------------------- memory: the row budget, staging


def test_compaction_growth_and_the_addressing_bound(monkeypatch):
    """Slots admitted again and again fill the pool's top: live rows slide down and
    positions stay right; a request that does not fit the live rows' room grows the
    pool (doubling) instead of being refused; only past the pool's addressing bound
    is an admission refused, changing nothing."""
    config = MRopeConfig(family="qwen2_vl", semantics="vllm-0.33")
    rng = np.random.default_rng(0)

    def layout(n_images):
        ranges, grids, at = [], [], 1
        for _ in range(n_images):
            ranges.append((at, 4))
            grids.append([1, 4, 4])
            at += 6
        return PromptLayout.from_ranges(config, at + 1, image_ranges=ranges or None, image_grid_thw=grids or None)

    h = Harness(config, 3, 64, 256, DEVICE, block_size=BLOCK, max_num_rows=24)
    for _ in range(12):
        slot = int(rng.integers(0, 3))
        h.admit(slot, layout(int(rng.integers(0, 4))))
        h.step([(s, int(h.prefill_len[s])) for s in range(3) if h.held[s]])
        h.state.check_invariants()
    for slot in range(3):
        h.admit(slot, layout(3))  # 7 rows each: 21 of 24
    h.admit(0, layout(8))  # 17 rows: 14 live elsewhere + 17 > 24
    assert h.state.max_num_rows == 48  # doubled once: 31 live rows would fill more than 3/4 of 24
    h.state.check_invariants()
    h.step([(0, int(h.prefill_len[0]))])
    h.step([(2, int(h.prefill_len[2])), (1, int(h.prefill_len[1]))])
    monkeypatch.setattr(h.state._rows.arena, "limit", 48)  # noqa: SLF001
    before = h.state._records.copy(), h.state._rows.rows_held.copy(), h.state.max_num_rows  # noqa: SLF001
    with pytest.raises(ValueError, match="prefill_token_ids: live requests hold 24 device rows and this one needs 25"):
        h.state.init_prefill_layout(1, layout(12))  # 25 rows: 24 live elsewhere + 25 > 48
    after = h.state._records, h.state._rows.rows_held, h.state.max_num_rows  # noqa: SLF001
    assert (after[0] == before[0]).all() and (after[1] == before[1]).all() and after[2] == before[2]
    h.step([(1, int(h.prefill_len[1]))])


def test_staging_smaller_than_a_request():
    """A staging buffer that holds less than one request's rows: the writes are split
    and applied as the buffer fills; the positions are the same."""
    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2, semantics="vllm-0.33")
    ranges = [(1 + 20 * k, 16) for k in range(12)]
    layout = PromptLayout.from_ranges(
        config, 245, video_ranges=ranges, video_grid_thw=[[4, 4, 4]] * 12, second_per_grid_ts=[0.7, 1.3] * 6
    )
    small = PromptLayout.from_ranges(config, 25, video_ranges=ranges[:1], video_grid_thw=[[4, 4, 4]])
    h = Harness(config, 3, 160, 512, DEVICE, block_size=BLOCK, staging_bytes=1024)
    assert (layout.num_rows + 2) * 11 > 1024 // 4  # more than a whole staging buffer: split
    h.admit(0, layout)
    h.admit(1, layout, 50)
    for _ in range(7):  # records and rows landing on every buffer boundary, slot 2 admitted again and again
        h.state.init_prefill_layout(2, small)
    h.admit(2, small)
    h.step([(1, 60), (0, 64), (2, 25)])


def test_memory_at_vllm_scale():
    """1,024 slots x 262,144 max_model_len, 8 items a request: the device state stays
    under 8 MiB and the pinned staging under 1 MiB (vLLM's table: 3 GiB), whatever
    max_model_len is (on a CPU, the host staging stands for the pinned one)."""
    state = RopeState(3, 1024, 8192, 262144, DEVICE)
    sizes = state.nbytes()
    host = sizes.get("staging_pinned", sizes.get("staging_host"))
    assert sum(sizes.values()) - host <= 8 * 2**20 and host <= 2**20
    if DEVICE != "cpu":
        assert state.device_nbytes() == sum(sizes.values()) - host and state.pinned_nbytes() == host
    assert state.max_num_rows >= 1024 * 17  # 8 items and the text around them, for every slot at once
    assert state.nbytes() == planned_nbytes(1024, 8192, on_cuda=DEVICE != "cpu")
    small = RopeState(3, 4, 16, 64, DEVICE, max_num_rows=50, staging_bytes=4096)
    assert small.nbytes() == planned_nbytes(4, 16, on_cuda=DEVICE != "cpu", max_num_rows=50, staging_bytes=4096)


# ---------------------------------------------------------------- EVS hooks


def test_update_prefill_positions_gives_a_dense_override():
    """Arbitrary positions (no layout fits them) for the first n tokens and a new delta:
    steps and reads use them at once, the other tokens keep their rows; admitting the
    slot again or removing it frees the override."""
    state, layout = _state_with_a_request()
    rng = np.random.default_rng(1)
    dense = torch.from_numpy(rng.integers(0, 1000, (3, 12))).to(DEVICE)
    state.update_prefill_positions(1, dense, 55)
    expected = torch.from_numpy(layout.positions())
    expected[:, :12] = dense.cpu()
    assert torch.equal(state.read_prefill_positions(1, 20).cpu().long(), expected)
    idx, qsl, prefill, computed = index_tensors([1], [0, 10], [0, 20, 0, 0], [0, 8, 0, 0])
    state.prepare_positions(idx, qsl, prefill, computed)
    got = state.get_positions(10).cpu()
    assert torch.equal(got[:, :4], dense.cpu()[:, 8:12]) and torch.equal(got[:, 4:], expected[:, 12:18])
    idx, qsl, prefill, computed = index_tensors([1], [0, 2], [0, 20, 0, 0], [0, 30, 0, 0])
    state.prepare_positions(idx, qsl, prefill, computed)
    assert state.get_positions(2).cpu().tolist() == [[85, 86]] * 3  # index + the new delta
    assert state.nbytes()["evs_arena"] == 3 * 12 * 4
    state.init_prefill_layout(1, layout)  # the slot admitted again: override gone
    assert torch.equal(state.read_prefill_positions(1, 20).cpu().long(), torch.from_numpy(layout.positions()))
    state.update_prefill_positions(1, dense, 3)
    state.remove_request(1)
    state.apply_staged_writes()
    assert state.nbytes()["evs_arena"] == 4
    assert state.read_prefill_positions(1, 3).cpu().tolist() == [[0, 1, 2]] * 3
    state.check_invariants()


with open(EVS_PATH) as _f:
    EVS = [json.loads(line) for line in _f][:4]


@pytest.mark.parametrize("vector", EVS, ids=[f"{i}-{v['family']}" for i, v in enumerate(EVS)])
def test_recorded_evs_positions(vector):
    """vLLM 0.33's recomputed EVS positions (recorded, pruned videos: no layout row fits
    them) written over a request: read back as they are, used by a chunked prefill,
    and the new delta past them."""
    n = len(vector["token_ids"])
    config = MRopeConfig.from_hf_config(vector["config"], semantics="vllm-0.33")
    h = Harness(config, 2, 64, n + 64, DEVICE)
    h.admit(1, PromptLayout.from_ranges(config, n))
    after = torch.tensor(vector["positions"], device=DEVICE)
    h.state.update_prefill_positions(1, after, vector["delta"])
    h.table.update(1, after.cpu(), vector["delta"])
    assert h.state.read_prefill_positions(1, n).cpu().tolist() == vector["positions"]
    for start in range(0, n, 48):
        h.num_computed[1] = start
        count = min(48, n - start)
        idx, qsl, prefill, computed = index_tensors([1], [0, count], h.prefill_len, h.num_computed)
        h.state.prepare_positions(idx, qsl, prefill, computed)
        expected = [row[start : start + count] for row in vector["positions"]]
        assert h.state.get_positions(count).cpu().tolist() == expected
    h.num_computed[1] = n + 2
    idx, qsl, prefill, computed = index_tensors([1], [0, 1], h.prefill_len, h.num_computed)
    h.state.prepare_positions(idx, qsl, prefill, computed)
    assert h.state.get_positions(1).cpu().tolist() == [[n + 2 + vector["delta"]]] * 3


# ---------------------------------------------------------------- bad input


def _snapshot(state):
    return (
        state._records.copy(),  # noqa: SLF001
        state._rows.rows_held.copy(),  # noqa: SLF001
        state._rows.top,  # noqa: SLF001
        state.read_prefill_positions(1, 20).cpu(),
    )


def _same(a, b):
    return (a[0] == b[0]).all() and (a[1] == b[1]).all() and a[2] == b[2] and torch.equal(a[3], b[3])


def test_bad_input_names_the_argument_and_changes_nothing():
    state, layout = _state_with_a_request()
    before = _snapshot(state)
    idx, qsl, prefill, computed = index_tensors([1], [0, 4], [0, 20, 0, 0], [0, 0, 0, 0])
    cases = [
        (lambda: state.init_prefill_layout(4, layout), ValueError, "req_idx"),
        (lambda: state.init_prefill_layout(-1, layout), ValueError, "req_idx"),
        (lambda: state.init_prefill_layout(True, layout), TypeError, "req_idx"),
        (lambda: state.init_prefill_layout(0, "rows"), TypeError, "layout"),
        (
            lambda: state.init_prefill_layout(0, PromptLayout.from_ranges(MRopeConfig(family="qwen2_vl"), 5)),
            ValueError,
            "layout",
        ),
        (lambda: state.init_prefill_positions(0, state.config, [1] * 65, []), ValueError, "prefill_token_ids"),
        (lambda: state.init_prefill_positions(0, state.config, "abc", []), TypeError, "prefill_token_ids"),
        (lambda: state.init_prefill_positions(0, object(), [1, 2], []), ValueError, "mm_features|model")
        if state.config is None
        else (lambda: state.init_prefill_positions(0, state.config, [1, 2], "x"), TypeError, "mm_features"),
        (lambda: state.prepare_positions(idx.to(torch.int16), qsl, prefill, computed), TypeError, "idx_mapping"),
        (lambda: state.prepare_positions(idx.float(), qsl, prefill, computed), TypeError, "idx_mapping"),
        (lambda: state.prepare_positions(idx.tolist(), qsl, prefill, computed), TypeError, "idx_mapping"),
        (lambda: state.prepare_positions(idx, qsl[:1], prefill, computed), ValueError, "query_start_loc"),
        (lambda: state.prepare_positions(idx, qsl, prefill[:2], computed), ValueError, "prefill_lens"),
        (lambda: state.prepare_positions(idx, qsl, prefill, computed.view(2, 2)), ValueError, "num_computed"),
        (lambda: state.prepare_positions(idx.repeat(5), qsl, prefill, computed), ValueError, "idx_mapping"),
        (lambda: state.prepare_positions(idx, qsl, prefill, computed[::2]), ValueError, "num_computed"),
        (lambda: state.read_prefill_positions(1, 65), ValueError, "length"),
        (lambda: state.read_prefill_positions(7, 3), ValueError, "req_idx"),
        (lambda: state.update_prefill_positions(1, torch.zeros(3, 21, dtype=torch.int64), 0), ValueError, "positions"),
        (lambda: state.update_prefill_positions(1, torch.zeros(2, 4, dtype=torch.int64), 0), ValueError, "positions"),
        (lambda: state.update_prefill_positions(1, torch.zeros(3, 4), 0), TypeError, "positions"),
        (lambda: state.update_prefill_positions(1, [[0]] * 3, 0), TypeError, "positions"),
        (lambda: state.update_prefill_positions(1, torch.zeros(3, 4, dtype=torch.int64), 1.5), TypeError, "delta"),
        (lambda: state.update_prefill_positions(1, torch.zeros(3, 4, dtype=torch.int64), 2**40), ValueError, "delta"),
        (
            lambda: state.update_prefill_positions(1, torch.zeros(3, 4, dtype=torch.int64).to_sparse(), 0),
            TypeError,
            "positions",
        ),
        (lambda: state.update_prefill_positions(1, torch.zeros(3, 4, dtype=torch.uint64), 0), TypeError, "positions"),
        (
            lambda: state.update_prefill_positions(1, torch.zeros(3, 4, dtype=torch.int64, device="meta"), 0),
            TypeError,
            "positions",
        ),
        (lambda: state.get_positions(33 + 1), ValueError, "num_tokens"),
    ]
    if DEVICE == "cpu":
        meta = torch.zeros(4, dtype=torch.int32, device="meta")
        cases.append((lambda: state.prepare_positions(idx, qsl, meta, computed), ValueError, "prefill_lens"))
    for call, error, name in cases:
        with pytest.raises(error, match=name):
            call()
        assert _same(before, _snapshot(state))


def test_constructor_checks():
    for kwargs, error, name in [
        ({"num_dims": 5}, ValueError, "num_dims"),  # 3 (M-RoPE) or 4 (HunYuan-VL)
        ({"num_dims": 4, "config": MRopeConfig(family="qwen2_vl")}, ValueError, "num_dims"),  # not the family's
        ({"max_num_reqs": 0}, ValueError, "max_num_reqs"),
        ({"max_model_len": 2**31}, ValueError, "max_model_len"),
        ({"device": "nonsense"}, ValueError, "device"),
        ({"config": {"model_type": "qwen2_vl"}}, TypeError, "config"),
        ({"block_size": 24}, ValueError, "block_size"),
        ({"block_size": 64, "prompt_block": 128}, ValueError, "prompt_block"),  # at most the block
        ({"prompt_block": 48}, ValueError, "prompt_block"),  # a power of two
        ({"prompt_block": 8}, ValueError, "prompt_block"),  # at least 16
        ({"max_num_rows": 0}, ValueError, "max_num_rows"),
    ]:
        args = {"num_dims": 3, "max_num_reqs": 2, "max_num_tokens": 8, "max_model_len": 64, "device": DEVICE}
        args.update(kwargs)
        with pytest.raises(error, match=name):
            RopeState(**args)


def test_get_rope_state():
    """vLLM's signature: None without M-RoPE, else a RopeState built from model_config.hf_config."""

    class ModelConfig:
        def __init__(self, uses_mrope):
            self.uses_mrope = uses_mrope
            self.mrope_num_dims = 3
            with open(os.path.join(os.path.dirname(__file__), "data", "configs", "qwen2_vl.json")) as f:
                self.hf_config = json.load(f)

    assert get_rope_state(ModelConfig(False), None, 4, 16, 64, DEVICE) is None
    state = get_rope_state(ModelConfig(True), None, 4, 16, 64, DEVICE)
    assert isinstance(state, RopeState) and state.config.family == "qwen2_vl"
    assert state.config.semantics == "vllm-0.33"
    assert state.positions.shape == (3, 17) and state.positions.dtype == torch.int64
    assert layout_from_features is not None


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU, gpu_check runs in full instead")
def test_gpu_check_smoke_runs_on_a_cpu(tmp_path):
    """`python -m mrope_tracker.bench.gpu_check --smoke` runs RopeState's device check end
    to end in triton's interpreter, and finds it equal to the CPU tracker and the baseline."""
    import subprocess
    import sys

    out = tmp_path / "smoke.json"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    command = [sys.executable, "-m", "mrope_tracker.bench.gpu_check", "--smoke", "--no-tests", "--json", str(out)]
    subprocess.run(command, check=True, env=env, capture_output=True, timeout=600)
    results = json.loads(out.read_text())["rope_state"]
    assert results["checks"] and all(c["equal"] for c in results["checks"])
    assert results["memory"]["rope_state_device_bytes"] <= 8 * 2**20
    baseline = results["checks"][0]["baseline"]  # vLLM's own RopeState where vLLM imports, named by its release
    vllms = r"vLLM (0\.3[34]\.\S+|\?) RopeState( \(its 2 files, no UVA\))?"
    assert baseline == "table design (re-stated)" or re.fullmatch(vllms, baseline)
    assert {r["contender"] for r in results["steps"]} == {"RopeState (ours)", baseline}
    assert results["long_video"]["equal"]


@pytest.mark.slow
def test_kernels_compile_for_an_h200():
    """The kernels compile for a compute capability 9.0 GPU (H100, H200) without one: the
    interpreter runs them, the compiler checks what the interpreter lets through."""
    import subprocess
    import sys

    code = (
        "import json\n"
        "from mrope_tracker.bench.triton_compile import compile_for_gpu, registers\n"
        "print(json.dumps([compile_for_gpu(90), registers(90, blocks=(128,), warps=(4,))]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    results, usage = json.loads(out.stdout.strip().splitlines()[-1])
    assert results == dict.fromkeys(("prepare_kernel", "read_kernel", "scatter_kernel"), "ok"), results
    # the register report reads the compiled cubin: a 128-lane block on 4 warps needs some registers and no spills
    (row,) = usage
    assert (row["block"], row["warps"], row["stack_bytes"]) == (128, 4, 0) and 16 <= row["registers"] <= 255, row


# ---------------------------------------------------------------- EVS by our rule, Isaac's raw grids


def _serve_all(state, slot, n, chunk):
    """Every token of slot `slot`'s prompt in chunks, then two decode tokens: their positions, [3, n + 2]."""
    got, done = [], 0
    while done < n + 2:
        count = min(chunk, n + 2 - done)
        prefill = [0] * state.max_num_reqs
        prefill[slot] = n
        computed = [0] * state.max_num_reqs
        computed[slot] = done
        idx, qsl, prefill_t, computed_t = index_tensors([slot], [0, count], prefill, computed)
        state.prepare_positions(idx, qsl, prefill_t, computed_t)
        got.append(state.get_positions(count).cpu().numpy().copy())
        done += count
    return np.concatenate(got, axis=1)


# one short Qwen2.5-VL and one short Qwen3-VL vector in the default run; the long ones (the Triton
# interpreter runs every chunk) under -m slow
@pytest.mark.parametrize("index", [1, 41, *(pytest.param(i, marks=pytest.mark.slow) for i in (0, 2, 40, 45))])
def test_pruned_videos_by_our_rule(index):
    """init_prefill_pruned before the mask, set_retention_mask after, then
    chunked steps: the tracker's layout (mask rows included) on the device."""
    from mrope_tracker.evs import PrunedPrompt

    with open(EVS_PATH) as f:
        vector = [json.loads(line) for line in f][index]
    config = MRopeConfig.from_hf_config(vector["config"])
    prompt = PrunedPrompt(
        config,
        vector["token_ids"],
        video_grid_thw=vector["video_grid_thw"],
        second_per_grid_ts=vector.get("second_per_grid_ts"),
    )
    n = len(vector["token_ids"])
    state = PrunedRopeState(3, 3, n + 8, n + 64, DEVICE, config=config, block_size=BLOCK)
    state.init_prefill_pruned(1, prompt)
    for k, mask in enumerate(vector["retention_masks"]):
        state.set_retention_mask(1, k, mask)
    state.apply_staged_writes()
    layout = prompt.layout(vector["retention_masks"])
    expected = np.concatenate([layout.positions(), np.arange(n, n + 2)[None].repeat(3, 0) + layout.delta], axis=1)
    np.testing.assert_array_equal(_serve_all(state, 1, n, 7 + index % 11), expected)
    np.testing.assert_array_equal(state.read_prefill_positions(1, n).cpu().numpy(), layout.positions())
    with pytest.raises(ValueError, match="given already"):
        state.set_retention_mask(1, 0, vector["retention_masks"][0])
    with pytest.raises(ValueError, match="init_prefill_pruned"):
        state.set_retention_mask(0, 0, vector["retention_masks"][0])
    state.check_invariants()


def test_mask_rows_on_the_device():
    """A scattered mask makes GRID_BITS rows; the device kernel selects each kept token's bit."""
    from mrope_tracker.evs import PrunedPrompt
    from mrope_tracker.kernels import layout_codes as C

    config = MRopeConfig(family="qwen2_5_vl", tokens_per_second=2)
    vs, video, ve = config.vision_start_token_id, config.video_token_id, config.vision_end_token_id
    t, size = 6, 7 * 9
    mask = np.zeros(t * size, bool)
    mask[:size] = True
    mask[size + np.random.default_rng(3).choice(t * size - size, 70, replace=False)] = True
    ids = [1, vs] + [video] * int(mask.sum()) + [ve, 2]
    prompt = PrunedPrompt(config, ids, video_grid_thw=[[t, 14, 18]], second_per_grid_ts=[1.3])
    layout = prompt.layout([mask])
    assert (layout.rows[:, C.COL_KIND] == C.KIND_GRID_BITS).any()
    state = PrunedRopeState(3, 2, len(ids) + 4, len(ids) + 16, DEVICE, config=config, block_size=BLOCK)
    state.init_prefill_pruned(0, prompt, retention_masks=[mask])
    state.apply_staged_writes()
    np.testing.assert_array_equal(_serve_all(state, 0, len(ids), 13)[:, : len(ids)], layout.positions())


def test_isaac_raw_grids_on_the_device():
    """Isaac's images are GRID_RAW rows (H and W without the base): vLLM 0.33's own positions."""
    from vllm_families import load_more_vectors
    from vllm_families import vector_features as more_features

    vector = load_more_vectors(("isaac",))[0]
    config = MRopeConfig.from_hf_config(vector["config"], semantics="vllm-0.33")
    n = len(vector["token_ids"])
    state = RopeState(3, 2, n + 8, n + 64, DEVICE, config=config, block_size=BLOCK)
    state.init_prefill_positions(0, config, vector["token_ids"], more_features(vector))
    state.apply_staged_writes()
    assert _serve_all(state, 0, n, 9)[:, :n].tolist() == vector["positions"]


def test_grids_past_int32_indices_are_refused():
    """A grid far larger than its prompt (positions fit in int32, its token indices do not) is refused at
    admission, naming the layout, instead of wrapping in the device's int32 arithmetic."""
    from mrope_tracker.kernels import layout_codes as C

    config = MRopeConfig(family="qwen2_vl")
    rows = np.zeros((1, C.NUM_COLS), np.int64)
    rows[0, [C.COL_TOK_LEN, C.COL_KIND, C.COL_GRID_OFFSET, C.COL_T, C.COL_H, C.COL_W]] = [
        1,
        C.KIND_GRID,
        700_000_000,
        1,
        70_000,
        70_000,
    ]
    layout = PromptLayout(rows, np.zeros((1, 2), np.float32), 1, 10_000)  # token 0 at (0, 10000, 0)
    state = RopeState(3, 2, 16, 64, DEVICE, config=config, block_size=BLOCK)
    with pytest.raises(ValueError, match="layout: a grid row's token indices"):
        state.init_prefill_layout(0, layout)
    state.check_invariants()


def test_override_positions_past_int32_are_refused():
    state, _ = _state_with_a_request()
    with pytest.raises(ValueError, match=r"positions: expected values in \[0, 2147483647\]"):
        state.update_prefill_positions(1, torch.full((3, 2), 2**31 + 5, dtype=torch.int64, device=DEVICE), 0)
