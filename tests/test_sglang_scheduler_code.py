"""The installed SGLang adapter against SGLang 0.5.23's own scheduler-side code.

Three files of the released wheel, loaded by path (bench/sglang_sources.py;
MROPE_SGLANG_ROPE_INDEX names ``mrope_rope_index.py`` in the folder where
.ci/run's SGLang stage unpacks them, the sglang package never imported):

- batches: SGLang's ``ForwardBatch._compute_mrope_positions`` (its extend and
  decode paths) and ``compute_spec_mrope_positions``
  (``forward_batch_info.py``) run on batches of requests whose (3, L)
  positions SGLang's own ``get_rope_index*`` made; the plugin's replacements
  of those two methods run on the same batches, every request holding its
  layout instead, and must give the same positions, column for column:
  random prompts of the model types both serve (Qwen3-Omni aside: its decode
  delta differs by design, defect 1 in docs/semantics.md), text requests
  beside them, any rows, any chunking, mixed batches (chunks beside decode
  tokens, which SGLang's extend path positions from the delta), and batches
  with a request the adapter does not serve (positions SGLang made itself),
  which the plugin hands to SGLang's own methods with the other requests'
  layouts lent as positions.
- retraction: SGLang's ``extend_mrope_positions_for_retracted_request``
  (``mm_utils.py``) extends a retracted request's table over the tokens it
  generated, and its extend path positions the request's second prefill from
  that table; the plugin keeps the layout, and the positions must agree (on
  prompts that end in text, as processors make them: SGLang defect 7 in
  docs/semantics.md is reproduced below).
- sessions: SGLang's ``Req._extend_session_image_inputs`` and
  ``MultimodalInputs.merge`` (``schedule_batch.py``) compose a session's
  (3, L) table turn by turn, generated and appended text between the turns;
  the plugin's replacements compose its layout from the same turns, and the
  positions, the delta and the next decode batch's positions must be SGLang's.

Where a file is missing, its tests skip.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from family_prompts import family_prompts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mrope_tracker.bench.sglang_sources import load_forward_batch, load_mm_utils, load_rope_index, load_schedule_batch
from sglang_calls import SERVED, config_for, sglang_positions
from strategies import examples

from mrope_tracker import MRopeConfig, PromptLayout
from mrope_tracker.sglang import hooks, plugin

SGLANG = load_rope_index()
FORWARD = load_forward_batch()
SCHEDULE = load_schedule_batch()
MM_UTILS = load_mm_utils()
if SGLANG is None or FORWARD is None:
    pytest.skip(
        "MROPE_SGLANG_ROPE_INDEX names no SGLang 0.5.23 mrope_rope_index.py with forward_batch_info.py beside it",
        allow_module_level=True,
    )

MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "paddleocr_vl", "qwen3_vl", "glm4v", "glm_ocr", "ernie4_5_moe_vl")
POOL_SIZE = 8
DRAFTS = 3


def _not_sglang(*args, **kwargs):
    raise AssertionError("the adapter handed a batch it serves to SGLang's own code")


# the plugin's replacements: with a stand-in for SGLang's methods where a batch must be served without them, and with
# SGLang's own where a request the adapter does not serve sends the batch to them
SERVED_ONLY = {
    "extend": plugin._compute_mrope_positions(_not_sglang),
    "speculative": plugin._compute_spec_mrope_positions(_not_sglang),
}
FALLING_BACK = {
    "extend": plugin._compute_mrope_positions(FORWARD.ForwardBatch._compute_mrope_positions),
    "speculative": plugin._compute_spec_mrope_positions(FORWARD.ForwardBatch.compute_spec_mrope_positions),
}


@st.composite
def batches(draw):
    """(model type, requests, rows, mode, per-request lengths): each request a (prompt or None for text, length)."""
    model_type = draw(st.sampled_from(MODEL_TYPES))
    family, config_name = SERVED[model_type]
    prompts = draw(st.lists(family_prompts(family, config_name=config_name, max_items=2), min_size=1, max_size=3))
    requests = [(p, len(p.token_ids)) for p in prompts]
    requests += [(None, n) for n in draw(st.lists(st.integers(1, 40), max_size=2))]
    requests = draw(st.permutations(requests))
    rows = draw(st.lists(st.integers(1, POOL_SIZE), min_size=len(requests), max_size=len(requests), unique=True))
    mode = draw(st.sampled_from(("extend", "mixed", "decode", "speculative")))
    if mode == "extend":  # a chunk of each prompt: [prefix, prefix + extend)
        prefix = [draw(st.integers(0, n - 1)) for _, n in requests]
        lens = [(p, draw(st.integers(1, n - p))) for p, (_, n) in zip(prefix, requests)]
    elif mode == "mixed":  # SGLang's mixed chunked prefill: chunks beside decode tokens (one token past a prompt)
        lens = []
        for _, n in requests:
            if draw(st.booleans()):
                p = draw(st.integers(0, n - 1))
                lens.append((p, draw(st.integers(1, n - p))))
            else:
                lens.append((n + draw(st.integers(0, 30)), 1))
    else:  # each request past its prompt
        lens = [n + draw(st.integers(1, 30)) for _, n in requests]
    # one request whose positions SGLang made itself (a processor path that never called get_rope_index*): the
    # adapter does not serve it, so the batch goes to SGLang's own code, the layouts lent as positions
    foreign = draw(st.sampled_from([None, *(k for k, (prompt, _) in enumerate(requests) if prompt is not None)]))
    return model_type, requests, rows, mode, lens, foreign


def _their_input(model_type, prompt):
    """A request's multimodal inputs as SGLang's processor leaves them: its (3, L) positions and delta."""
    if prompt is None:
        return None
    positions, delta = sglang_positions(SGLANG, prompt, model_type)
    return types.SimpleNamespace(
        mrope_positions=torch.from_numpy(positions),
        mrope_position_delta=torch.tensor([[int(delta)]], dtype=torch.int64),
        mrope_position_delta_repeated_cache=None,
    )


def _our_req(model_type, prompt, length, foreign: bool):
    """A request as the scheduler holds it under the plugin: its layout in `mrope_positions` (with the delta
    the processor stored), or where `foreign` SGLang's own inputs."""
    ids = list(range(length)) if prompt is None else list(prompt.token_ids)
    if prompt is None:
        return types.SimpleNamespace(multimodal_inputs=None, origin_input_ids=ids, session=None)
    if foreign:
        return types.SimpleNamespace(
            multimodal_inputs=_their_input(model_type, prompt), origin_input_ids=ids, session=None
        )
    config = MRopeConfig.from_hf_config(config_for(prompt, model_type), semantics="sglang-0.5")
    layout = PromptLayout.from_tokens(config, ids, **prompt.kwargs())
    inputs = types.SimpleNamespace(
        mrope_positions=hooks.layout_tensor(layout),
        mrope_position_delta=torch.tensor([[layout.delta]], dtype=torch.int64),
        mrope_position_delta_repeated_cache=None,
    )
    return types.SimpleNamespace(multimodal_inputs=inputs, origin_input_ids=ids, session=None)


def _forward(mode, seq_lens, rows):
    forward = object.__new__(FORWARD.ForwardBatch)  # (its dataclass fields the position methods do not read stay unset)
    forward.forward_mode = {"decode": FORWARD.ForwardMode.DECODE, "mixed": FORWARD.ForwardMode.MIXED}.get(
        mode, FORWARD.ForwardMode.EXTEND
    )
    forward.seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int64)
    forward.seq_lens = forward.seq_lens_cpu.clone()
    forward.req_pool_indices = torch.tensor(rows, dtype=torch.int64)
    return forward


def _our_runner():
    """A model runner as the plugin reads it: a req_to_token pool whose rows were all allocated once."""
    pool = types.SimpleNamespace(size=POOL_SIZE, req_generation=torch.ones(POOL_SIZE + 1, dtype=torch.int64))
    return types.SimpleNamespace(req_to_token_pool=pool, device=torch.device("cpu"), server_args=None)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_the_plugins_batch_positions_are_sglangs_own(batch):
    """One batch through SGLang's own method on its tables and through the plugin's on the layouts: the same
    positions; where a request is not the adapter's, SGLang's method ran on the layouts lent as positions, which
    are layouts again afterwards."""
    model_type, requests, rows, mode, lens, foreign = batch
    if mode in ("extend", "mixed"):
        prefix, extend = [p for p, _ in lens], [e for _, e in lens]
        seq_lens = [p + e for p, e in lens]
    else:
        prefix = extend = None
        seq_lens = lens
    spec = None
    if mode == "speculative":  # each request's draft tokens, at its next DRAFTS positions
        spec = types.SimpleNamespace(positions=torch.tensor([s - 1 + j for s in seq_lens for j in range(DRAFTS)]))

    theirs = _forward(mode, seq_lens, rows)
    their_batch = types.SimpleNamespace(
        multimodal_inputs=[_their_input(model_type, prompt) for prompt, _ in requests],
        reqs=[types.SimpleNamespace(session=None) for _ in requests],
        prefix_lens=prefix,
        extend_lens=extend,
        spec_info=spec,
    )
    runner = types.SimpleNamespace(device=torch.device("cpu"))
    if mode == "speculative":
        FORWARD.ForwardBatch.compute_spec_mrope_positions(theirs, runner, their_batch)
    else:
        FORWARD.ForwardBatch._compute_mrope_positions(theirs, runner, their_batch)

    ours = _forward(mode, seq_lens, rows)
    reqs = [_our_req(model_type, prompt, n, k == foreign) for k, (prompt, n) in enumerate(requests)]
    our_batch = types.SimpleNamespace(
        reqs=reqs,
        multimodal_inputs=[req.multimodal_inputs for req in reqs],
        req_pool_indices_cpu=torch.tensor(rows, dtype=torch.int64),
        prefix_lens=prefix,
        extend_lens=extend,
        spec_info=spec,
    )
    our_runner = _our_runner()
    replacements = SERVED_ONLY if foreign is None else FALLING_BACK
    replacements["speculative" if mode == "speculative" else "extend"](ours, our_runner, our_batch)
    np.testing.assert_array_equal(ours.mrope_positions.numpy(), theirs.mrope_positions.numpy())
    if foreign is not None:  # the layouts lent for that call are back in place
        assert all(hooks.is_layout_tensor(req.multimodal_inputs.mrope_positions)
                   for k, req in enumerate(reqs) if req.multimodal_inputs is not None and k != foreign)  # fmt: skip


def test_the_bench_times_sglangs_own_batch_methods():
    """`mrope-tracker bench --suite sglang` with this file times SGLang's own methods, after checking that
    they give the adapter's positions."""
    from mrope_tracker.bench import suite_sglang

    rows = suite_sglang.batch_rows(True, lambda message: None, FORWARD)
    assert {row["mode"] for row in rows} == {"extend", "decode", "speculative"}
    assert all(row["sglang_us"] > 0 and row["served_us"] > 0 for row in rows)


def test_the_plugins_targets_in_these_files_are_sglangs():
    """What `install()` checks before patching, on SGLang's own files rather than the recorded API: each
    function of mrope_rope_index.py and each ForwardBatch method it patches exists with SGLang's parameters."""
    checked = []
    for module_name, name, expected, _ in plugin.FUNCTIONS:
        if module_name == plugin.ROPE_INDEX:
            checked.append(plugin._check(name, getattr(SGLANG, name, None), expected))
    for module_name, class_name, name, expected, _ in plugin.METHODS:
        if module_name == plugin.FORWARD:
            checked.append(plugin._check(name, vars(getattr(FORWARD, class_name)).get(name), expected))
    assert len(checked) == 6  # four get_rope_index* functions, two ForwardBatch methods


# ---------------------------------------------------------------------------------------------- sessions
SESSION_TYPES = ("qwen2_5_vl", "qwen3_vl", "glm4v")
REPLY_TOKEN = 1  # the text a request generated between two turns (its ids do not matter: text)


@st.composite
def sessions(draw):
    """(model type, turns, generated): each turn a prompt with an item, and before each later turn the number of
    tokens the request generated."""
    model_type = draw(st.sampled_from(SESSION_TYPES))
    family, config_name = SERVED[model_type]
    turn = family_prompts(family, config_name=config_name, max_items=2).filter(
        lambda p: bool(p.image_grid_thw or p.video_grid_thw)
    )
    turns = draw(st.lists(turn, min_size=2, max_size=3))
    return model_type, turns, [draw(st.integers(0, 12)) for _ in turns[1:]]


def _turn_inputs(positions, delta):
    return SCHEDULE.MultimodalInputs(mm_items=[], mrope_positions=positions, mrope_position_delta=delta)


def _session_req():
    req = object.__new__(SCHEDULE.Req)  # (the fields session composing does not read stay unset)
    req._session_mm_items = []
    req.multimodal_inputs = None
    req.session = types.SimpleNamespace()
    return req


@pytest.mark.skipif(SCHEDULE is None, reason="no schedule_batch.py beside MROPE_SGLANG_ROPE_INDEX's file")
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_a_sessions_positions_are_sglangs_own(session):
    """Turn by turn, SGLang's own `_extend_session_image_inputs` composes its (3, L) table and the plugin's
    composes the layout; the whole session's positions, its delta and the next decode step agree."""
    model_type, turns, generated = session
    theirs, ours = _session_req(), _session_req()
    extend = plugin._extend_session_image_inputs(SCHEDULE.Req._extend_session_image_inputs)
    real_merge = SCHEDULE.MultimodalInputs.merge
    ids: list = []
    for k, prompt in enumerate(turns):
        ids = ids + [REPLY_TOKEN] * (generated[k - 1] if k else 0) + list(prompt.token_ids)
        theirs.origin_input_ids = ours.origin_input_ids = ids
        their_turn = _their_input(model_type, prompt)
        SCHEDULE.Req._extend_session_image_inputs(
            theirs, _turn_inputs(their_turn.mrope_positions, their_turn.mrope_position_delta)
        )
        our_turn = _our_req(model_type, prompt, len(prompt.token_ids), False).multimodal_inputs
        SCHEDULE.MultimodalInputs.merge = plugin._merge(real_merge)  # (as install() patches it)
        try:
            extend(ours, _turn_inputs(our_turn.mrope_positions, our_turn.mrope_position_delta))
        finally:
            SCHEDULE.MultimodalInputs.merge = real_merge
    layout = hooks.layout_of_tensor(ours.multimodal_inputs.mrope_positions)
    np.testing.assert_array_equal(layout.positions(), theirs.multimodal_inputs.mrope_positions.numpy())
    assert (
        layout.delta
        == int(theirs.multimodal_inputs.mrope_position_delta)
        == int(ours.multimodal_inputs.mrope_position_delta)
    )
    # the next decode step, through each side's batch code
    seq_lens, runner = [len(ids) + 1], types.SimpleNamespace(device=torch.device("cpu"))
    their_step = _forward("decode", seq_lens, [1])
    FORWARD.ForwardBatch._compute_mrope_positions(
        their_step, runner, types.SimpleNamespace(multimodal_inputs=[theirs.multimodal_inputs], reqs=[theirs])
    )
    our_step = _forward("decode", seq_lens, [1])
    our_runner = _our_runner()
    our_batch = types.SimpleNamespace(
        reqs=[ours], multimodal_inputs=[ours.multimodal_inputs], req_pool_indices_cpu=torch.tensor([1])
    )
    SERVED_ONLY["extend"](our_step, our_runner, our_batch)
    np.testing.assert_array_equal(our_step.mrope_positions.numpy(), their_step.mrope_positions.numpy())


# ---------------------------------------------------------------------------------------------- retraction
@pytest.mark.skipif(MM_UTILS is None, reason="no mm_utils.py beside MROPE_SGLANG_ROPE_INDEX's file")
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(MODEL_TYPES).flatmap(lambda t: st.tuples(st.just(t), family_prompts(SERVED[t][0],
       config_name=SERVED[t][1], max_items=2))), st.integers(1, 20), st.data())  # fmt: skip
def test_a_retracted_requests_second_prefill_is_positioned_as_sglang_does(typed_prompt, output_len, data):
    """A request retracted after `output_len` tokens is prefilled again over its prompt and those tokens:
    SGLang extends its table (its mm_utils function), the plugin leaves the layout as it is, and every chunk of
    the second prefill gets the same positions through each side's extend path."""
    model_type, prompt = typed_prompt
    total = len(prompt.token_ids) + output_len
    prefix = data.draw(st.integers(0, total - 1))
    extend = data.draw(st.integers(1, total - prefix))
    their = _their_input(model_type, prompt)
    their.mrope_positions = MM_UTILS.extend_mrope_positions_for_retracted_request(their.mrope_positions, output_len)
    theirs = _forward("extend", [prefix + extend], [1])
    FORWARD.ForwardBatch._compute_mrope_positions(
        theirs,
        types.SimpleNamespace(device=torch.device("cpu")),
        types.SimpleNamespace(multimodal_inputs=[their], reqs=[types.SimpleNamespace(session=None)],
                              prefix_lens=[prefix], extend_lens=[extend]),
    )  # fmt: skip
    req = _our_req(model_type, prompt, len(prompt.token_ids), False)
    retracted = plugin._retracted(MM_UTILS.extend_mrope_positions_for_retracted_request)
    req.multimodal_inputs.mrope_positions = retracted(req.multimodal_inputs.mrope_positions, output_len)
    assert hooks.is_layout_tensor(req.multimodal_inputs.mrope_positions)  # (kept: nothing stored per token)
    ours = _forward("extend", [prefix + extend], [1])
    SERVED_ONLY["extend"](
        ours,
        _our_runner(),
        types.SimpleNamespace(reqs=[req], multimodal_inputs=[req.multimodal_inputs],
                              req_pool_indices_cpu=torch.tensor([1]), prefix_lens=[prefix], extend_lens=[extend]),
    )  # fmt: skip
    np.testing.assert_array_equal(ours.mrope_positions.numpy(), theirs.mrope_positions.numpy())


@pytest.mark.skipif(MM_UTILS is None, reason="no mm_utils.py beside MROPE_SGLANG_ROPE_INDEX's file")
def test_sglang_retraction_defect_reproduced():
    """docs/semantics.md, SGLang defect 7: a prompt ending inside an item continues at its last token's T + 1
    after a retraction, one before where SGLang's decode (L + delta) and the plugin put the same tokens."""
    vs, image = 151652, 151655
    ids = [1, vs, *[image] * 4]
    positions, delta = SGLANG.get_rope_index(2, image, 151656, vs, "qwen2_5_vl", 2, torch.tensor([ids]),
                                             torch.tensor([[1, 4, 4]]), None, None)  # fmt: skip
    assert positions[0, 0].tolist() == [0, 1, 2, 2, 2, 2] and int(delta) == -2
    extended = MM_UTILS.extend_mrope_positions_for_retracted_request(positions[:, 0], 3)
    assert extended[:, len(ids) :].tolist() == [[3, 4, 5]] * 3
    layout = PromptLayout.from_tokens(MRopeConfig(family="qwen2_5_vl", semantics="sglang-0.5"), ids,
                                      image_grid_thw=[[1, 4, 4]])  # fmt: skip
    assert [len(ids) + k + layout.delta for k in range(3)] == [4, 5, 6] == [len(ids) + k + int(delta) for k in range(3)]
