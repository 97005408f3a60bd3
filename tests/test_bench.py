"""The benchmark suites run, agree with our positions and report their results.

Timings are never asserted: the suites run with one short round each, and
the tests check what they return and what they check while they run.
"""

import json

import numpy as np
import pytest
import torch
from family_prompts import family_prompts
from hypothesis import assume, given
from hypothesis import strategies as st
from mrope_tracker.bench import report, seed_design, suite_prompt, suite_scheduler, transformers_rope
from mrope_tracker.bench.timing import torch_threads
from mrope_tracker.bench.workloads import (
    Scenario,
    family_prompt_cases,
    glm4v,
    qwen2_5_vl,
    qwen3_vl,
    scenarios,
    seed_prompt_cases,
)

from mrope_tracker import MRopeConfig, prompt_positions, reference

TINY = dict(rounds=1, target_s=1e-5)
SPREAD_KEYS = {"median", "min", "max"}


def _is_spread(value) -> bool:
    return isinstance(value, dict) and set(value) == SPREAD_KEYS and value["min"] <= value["median"] <= value["max"]


@pytest.fixture(scope="module")
def seed_cases():
    return seed_prompt_cases(qwen2_5_vl())


def test_seed_design_matches_the_reference_on_the_seed_cases(seed_cases):
    """The seed design's positions and delta equal the torch reference's on the six seed cases."""
    config = qwen2_5_vl()
    for name, prompt in seed_cases:
        expected, delta = reference.prompt_positions(config, prompt.token_ids, **prompt.kwargs)
        for form in ("array", "list"):
            got, got_delta = seed_design.seed_prompt_positions(
                config, prompt.token_ids, **suite_prompt.as_form(prompt.kwargs, form)
            )
            assert got_delta == delta, (name, form)
            np.testing.assert_array_equal(got, expected.numpy())


@given(prompt=st.sampled_from(("qwen2_vl", "qwen2_5_vl")).flatmap(lambda f: family_prompts(f, integer_sp=True)))
def test_seed_design_matches_prompt_positions_on_random_prompts(prompt):
    """On random Qwen2/2.5-VL prompts (whole-second time scales) the seed design equals prompt_positions."""
    assume(prompt.num_tokens > 0)
    config = MRopeConfig.from_hf_config(prompt.config)
    kwargs = prompt.kwargs()
    expected, delta = prompt_positions(config, np.array(prompt.token_ids), **kwargs)
    got, got_delta = seed_design.seed_prompt_positions(config, list(prompt.token_ids), **kwargs)
    assert got_delta == delta
    np.testing.assert_array_equal(got, expected)


def test_seed_design_refuses_a_missing_grid():
    """A placeholder run without a grid row raises ValueError naming token_ids."""
    config = qwen2_5_vl()
    ids = [1, config.image_token_id, config.image_token_id, 2]
    with pytest.raises(ValueError, match="token_ids"):
        seed_design.seed_prompt_positions(config, ids)


def test_seed_rows_report_every_ratio_with_its_spread(seed_cases):
    """seed_rows returns one row per case, every ratio as median/min/max, and marks the three largest."""
    rows = suite_prompt.seed_rows(seed_cases, qwen2_5_vl(), **TINY)
    assert [r["case"] for r in rows] == [name for name, _ in seed_cases]
    for r in rows:
        for key in ("speedup_lists", "speedup_arrays", "ours_vs_floor", "seed_vs_floor", "speedup_reference"):
            assert _is_spread(r[key]), key
    largest = sorted((p.num_tokens for _, p in seed_cases), reverse=True)[:3]
    assert sorted(r["num_tokens"] for r in rows if r["large"]) == sorted(largest)


def test_family_rows_cover_qwen3_vl_and_glm():
    """family_rows checks Qwen3-VL and GLM cases against the reference (and transformers) and reports spreads."""
    small = lambda config: family_prompt_cases(config)[:1]  # noqa: E731
    rows = suite_prompt.family_rows((("Qwen3-VL", qwen3_vl()), ("GLM", glm4v())), cases=small, **TINY)
    assert [r["family"] for r in rows] == ["Qwen3-VL", "GLM"]
    for r in rows:
        assert _is_spread(r["speedup"])
        assert (r["speedup_transformers"] is None) == (not transformers_rope.available())


@pytest.mark.parametrize("make_config", [qwen3_vl, glm4v])
def test_frame_videos_match_the_reference(make_config):
    """The 64-frame timestamped video workload is positioned alike by prompt_positions and the reference."""
    config = make_config()
    _, prompt = family_prompt_cases(config)[1]
    expected, delta = reference.prompt_positions(config, prompt.token_ids, **prompt.kwargs)
    got, got_delta = prompt_positions(config, prompt.token_ids, **prompt.kwargs)
    assert got_delta == delta
    np.testing.assert_array_equal(got, expected.numpy())


def test_input_forms_time_every_form(seed_cases):
    """input_form_rows times every grid form, token ids as a list and the three from_ranges forms."""
    rows = suite_prompt.input_form_rows(qwen2_5_vl(), seed_cases[1:2], **TINY)
    calls = [r["call"] for r in rows]
    assert calls[: len(suite_prompt.FORMS)] == [f"prompt_positions: grids as {f}" for f in suite_prompt.FORMS]
    assert "prompt_positions: token ids as a list" in calls
    assert sum(c.startswith("from_ranges") for c in calls) == 3
    assert all(_is_spread(r["vs_array"]) for r in rows)


def test_breakdown_times_each_part(seed_cases):
    """breakdown_rows times both kernels alone, the allocation, the floor and the list conversions."""
    (row,) = suite_prompt.breakdown_rows(qwen2_5_vl(), seed_cases[1:2], **TINY)
    assert {"prompt_positions, arrays", "our kernel alone", "seed kernel alone", "write floor"} <= set(row["us"])
    assert all(value > 0 for value in row["us"].values())


def test_torch_threads_are_restored():
    """The suites' one-thread torch setting is undone afterwards."""
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_qwen3_vl_scheduler_scenario_agrees_with_the_tracker():
    """Scenario e replays with every design's positions equal to the tracker's at every step."""
    full = next(s for s in scenarios(quick=True) if s.key == "e")
    small = Scenario(full.key, full.title, full.config, full.requests[:6], 4, 512, full.max_model_len)
    result = suite_scheduler.replay(small, suite_scheduler.schedule(small), lambda message: None)
    names = [d["design"] for d in result["designs"]]
    assert names[-1] == "mrope_tracker"
    mapped = [row["design"].split(":")[0] for row in result["id_mapping"]]
    assert mapped == ["MRV2-like (full table)", "mrope_tracker (slots)"]


def test_report_renders_a_prompt_result(seed_cases):
    """The markdown report renders seed, reference and input-form tables, and the result is JSON-serialisable."""
    config = qwen2_5_vl()
    seed = suite_prompt.seed_rows(seed_cases[:2], config, **TINY)
    result = {
        "seed": seed,
        "rows": [],
        "families": [],
        "input_forms": suite_prompt.input_form_rows(config, seed_cases[1:2], **TINY),
    }
    text = report.prompt_tables(result)
    assert "speedup, lists" in text and "from_ranges: ranges and grids as lists" in text
    json.dumps(result)


def test_check_outputs(tmp_path):
    """check_outputs accepts writable file paths and names the flag of a directory or a missing folder."""
    assert report.check_outputs(str(tmp_path / "out.json"), None) is None
    assert report.check_outputs(None, None) is None
    assert report.check_outputs("-", None) is None  # --json - is stdout
    assert report.check_outputs(str(tmp_path), None).startswith("--json")
    assert report.check_outputs(None, str(tmp_path / "missing" / "chart.png")).startswith("--plot")
