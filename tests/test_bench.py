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
from mrope_tracker.bench import report, seed_design, suite_prompt, suite_scheduler, transformers_rope, workloads
from mrope_tracker.bench.scenarios import Scenario, scenarios
from mrope_tracker.bench.timing import torch_threads
from mrope_tracker.bench.workloads import family_prompt_cases, glm4v, qwen2_5_vl, qwen3_vl, seed_prompt_cases

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


def test_vllm_family_rows_cover_the_four_vllm_only_families():
    """vllm_family_rows checks Keye-VL, Keye-VL-1.5, Isaac and openPangu-VL against the reference, with spreads."""
    from mrope_tracker.bench.workloads import vllm_only_family_cases

    cases = vllm_only_family_cases()
    assert sorted(config.family for _, config, _, _ in cases) == ["isaac", "keye", "keye_vl1_5", "openpangu_vl"]
    rows = suite_prompt.vllm_family_rows(cases=cases, **TINY)
    assert [r["family"] for r in rows] == ["Keye-VL", "Keye-VL-1.5", "Isaac", "openPangu-VL"]
    assert all(_is_spread(r["speedup"]) for r in rows)


def test_canvas_rows_check_minicpm_against_the_reference():
    """canvas_rows checks MiniCPM-V 4.7's canvas against the torch reference on
    each case (sliced pictures, a sliced video), with spreads."""
    from mrope_tracker.bench.canvas_workloads import canvas_cases

    cases = canvas_cases()[:1]
    rows = suite_prompt.canvas_rows(cases=cases, **TINY)
    assert [r["family"] for r in rows] == ["MiniCPM-V 4.7"]
    assert rows[0]["num_tokens"] == cases[0][1].num_tokens
    assert all(_is_spread(r["speedup"]) for r in rows)


def test_more_family_rows_cover_every_vllm_family():
    """One row per case of every family served to vLLM 0.33's rules, checked against the reference, with
    no transformers column; the report renders them within 120 columns."""
    rows = suite_prompt.family_rows(
        workloads.vllm_families(), cases=workloads.vllm_family_cases, with_hf=False, rounds=1, target_s=0.0005
    )
    labels = [label for label, _ in workloads.vllm_families()]
    assert list(dict.fromkeys(r["family"] for r in rows)) == labels
    videos = {r["family"] for r in rows if "video" in r["case"]}
    assert videos == {"ERNIE-4.5-VL", "GLM-OCR", "Cohere Compass"}
    for r in rows:
        assert _is_spread(r["speedup"]) and r["transformers_us"] is None
    text = report.prompt_tables({"seed": [], "rows": [], "families": [], "more_families": rows})
    assert "ERNIE-4.5-VL" in text
    assert max(len(line) for line in text.splitlines()) <= report.WIDTH


def test_more_family_rows_time_transformers_where_the_installed_line_has_the_family():
    """With transformers installed, the families it implements (5.x: PaddleOCR-VL, ERNIE-4.5-VL, GLM-OCR, Cohere
    Compass; 4.57: none) get transformers' time, checked equal to ours under its preset; the others None. The
    report adds the transformers table only when some row has a figure, within 120 columns."""
    first = lambda config: workloads.vllm_family_cases(config)[:2]  # noqa: E731 (an image; ERNIE's, GLM-OCR's, Cohere's video)
    families = workloads.vllm_families()
    rows = suite_prompt.family_rows(families, cases=first, rounds=1, target_s=0.0005)
    timed = {
        label for label, config in families if transformers_rope.available() and transformers_rope.implements(config)
    }
    if transformers_rope.available() and int(transformers_rope.version().split(".")[0]) >= 5:
        assert timed == {"PaddleOCR-VL", "ERNIE-4.5-VL", "GLM-OCR", "Cohere Compass"}
    else:
        assert timed == set()
    for r in rows:
        assert (r["transformers_us"] is not None) == (r["family"] in timed)
        assert (r["speedup_transformers"] is None) == (r["family"] not in timed)
    text = report.prompt_tables(
        {"seed": [], "rows": [], "families": [], "more_families": rows, "transformers": transformers_rope.version()}
    )
    assert ("vs transformers" in text) == bool(timed)
    assert max(len(line) for line in text.splitlines()) <= report.WIDTH


@pytest.mark.parametrize("make_config", [qwen3_vl, glm4v])
def test_frame_videos_match_the_reference(make_config):
    """The 64-frame timestamped video workload is positioned alike by prompt_positions and the reference."""
    config = make_config()
    _, prompt = family_prompt_cases(config)[1]
    expected, delta = reference.prompt_positions(config, prompt.token_ids, **prompt.kwargs)
    got, got_delta = prompt_positions(config, prompt.token_ids, **prompt.kwargs)
    assert got_delta == delta
    np.testing.assert_array_equal(got, expected.numpy())


def test_input_forms_cover_every_argument_in_every_form():
    """input_form_rows checks and times each argument of prompt_positions, from_ranges and the tracker's
    admission in every form, each as a ratio to the canonical call, and the report renders them within 120 columns."""
    forms = suite_prompt.input_form_rows(**TINY)
    keys = [key for key, _ in suite_prompt.FORMS]
    assert {"list", "tuple", "32-bit", "strided", "read-only", "tensor", "tensor32"} == set(keys)
    covered = {(r["call"], r["argument"]) for r in forms["rows"]}
    for argument in ("token_ids", "image_grid_thw", "video_grid_thw", "second_per_grid_ts", "audio_feature_lengths"):
        assert ("prompt_positions", argument) in covered
    for call in ("PromptLayout.from_ranges", "add_request_from_ranges"):
        assert {(call, a) for a in ("image/video_ranges", "image/video_grid_thw", "second_per_grid_ts")} <= covered
    assert {("add_request", a) for a in ("token_ids", "image/video_grid_thw", "second_per_grid_ts")} <= covered
    for r in forms["rows"]:
        assert r["canonical_us"] > 0 and set(r["vs_canonical"]) == set(keys)
        assert all(_is_spread(v) for v in r["vs_canonical"].values())
    text = report.input_form_tables(json.loads(json.dumps(forms)))
    assert "`add_request_from_ranges`" in text and "tensor, 32-bit" in text
    assert max(len(line) for line in text.splitlines()) <= report.WIDTH


def test_seed_forms_cover_every_form(seed_cases):
    """seed_form_rows checks and times the seed cases with every argument in each form, as ratios to our canonical
    call and speedups over the seed design given the same form, and the report renders them within 120 columns."""
    rows = suite_prompt.seed_form_rows(seed_cases[:2], qwen2_5_vl(), **TINY)
    forms = {"canonical", *(key for key, _ in suite_prompt.FORMS)}
    assert [r["case"] for r in rows] == [name for name, _ in seed_cases[:2]]
    for r in rows:
        assert r["canonical_us"] > 0 and set(r["vs_canonical"]) == forms == set(r["speedup"])
        assert all(_is_spread(v) for v in [*r["vs_canonical"].values(), *r["speedup"].values()])
    text = report.seed_form_tables(json.loads(json.dumps(rows)), [list(form) for form in suite_prompt.FORMS])
    assert "speedup over the seed design" in text and "tensor, 32-bit" in text
    assert max(len(line) for line in text.splitlines()) <= report.WIDTH


def test_in_form_keeps_the_values():
    """Every form holds the canonical values: strided views are not contiguous, read-only arrays not writable."""
    grid = np.array([[1, 4, 6], [2, 8, 8]], np.int64)
    times = np.array([0.5, 2.0])
    for form, _ in suite_prompt.FORMS:
        for value, time in ((grid, False), (times, True)):
            got = suite_prompt.in_form(value, form, time)
            as_array = got.numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
            np.testing.assert_array_equal(as_array, value)
    assert not suite_prompt.in_form(grid, "strided").flags.c_contiguous
    assert not suite_prompt.in_form(grid, "read-only").flags.writeable
    assert suite_prompt.in_form(times, "32-bit", time=True).dtype == np.float32
    assert suite_prompt.in_form(grid, "tensor32").dtype == torch.int32


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
    """The markdown report renders seed and reference tables within 120 columns, and the result is JSON-serialisable."""
    config = qwen2_5_vl()
    seed = suite_prompt.seed_rows(seed_cases[:2], config, **TINY)
    result = {
        "seed": seed,
        "rows": [],
        "families": [],
        "input_forms": suite_prompt.input_form_rows(**TINY, plan=[("prompt_positions", "token_ids")]),
    }
    text = report.prompt_tables(result)
    assert "speedup, lists" in text and "`prompt_positions`" in text
    assert max(len(line) for line in text.splitlines()) <= report.WIDTH
    json.dumps(result)


def test_every_table_fits_a_terminal():
    """Descriptive text wraps and every suite's table stays within 120 columns, on long labels and large numbers."""
    spread = {"median": 1234.5, "min": 1000.25, "max": 98765.4}
    text = "\n".join(
        [
            report.decode_tables(
                {
                    "per_request": [{"method": "numpy (vLLM V1)", "step_us": 157.1, "speedup": 8.0}],
                    "steps": [
                        {
                            "step": "mixed: 256 requests, 2252 tokens",
                            **{k: 12345.6 for k in ("v1_us", "prepare_us", "prepare_new_batch_us", "prepare_slots_us")},
                            **{k: spread for k in ("speedup_prepare", "speedup_prepare_new_batch", "speedup_slots")},
                        }
                    ],
                    "forms": [
                        {
                            "step": "mixed: 256 requests, 2252 tokens",
                            "entry": "prepare, list ids + list counts + num_computed_tokens list",
                            "us": 14.4,
                            "speedup": spread,
                        }
                    ],
                    "dispatch": [{"call": "njit function, 8 arguments, numba runtime", "step_us": 1.4}],
                }
            ),
            report.scheduler_tables(
                {
                    "scenarios": [
                        {
                            "scenario": "a",
                            "title": "seed e2e: 200 text + 1 image (324) in, 200 out " * 3,
                            **{k: 123456 for k in ("requests", "steps", "tokens", "max_num_seqs")},
                            "max_num_batched_tokens": 8192,
                            "designs": [
                                {
                                    "design": "MRV2-like (full table): ids to slots (outside its row)",
                                    "total_ms": 12345.6,
                                    "total_vs_tracker": 1234.5,
                                    "admit_ms": 12345.6,
                                    "steps_ms": 12345.6,
                                    "step_median_us": 12345.6,
                                    "step_vs_tracker": 1234.5,
                                    "peak_bytes": 2**31,
                                }
                            ],
                        }
                    ]
                }
            ),
            report.memory_tables(
                {
                    "rows": [
                        {
                            "max_num_reqs": 1024,
                            "prompt_tokens": 8192,
                            "max_model_len": 131072,
                            "images_per_request": 8,
                            **{k: 2**31 for k in ("v1_bytes", "mrv2_bytes", "tracker_request_state_bytes")},
                            "tracker_bytes": 2**31,
                            "v1_per_request_bytes": 196608,
                            "tracker_per_request_bytes": 1416,
                            "rope_state_device_bytes": 2**31,
                            "rope_state_pinned_bytes": 2**31,
                            "rope_state_rows_used": 10**9,
                            "rope_state_max_num_rows": 10**9,
                        }
                    ]
                }
            ),
        ]
    )
    assert max(len(line) for line in text.splitlines()) <= report.WIDTH


def test_hf_and_startup_tables_are_aligned():
    """The hf and startup suites render through the report's table: aligned columns within 120 columns."""
    from mrope_tracker.bench import suite_hf, suite_startup

    speedup = {"median": 827.0, "min": 801.0, "max": 837.0}
    hf = suite_hf.tables(
        {
            "transformers": "4.57.6",
            "semantics": "transformers-4.57",
            "target": 50,
            "rows": [
                {
                    "family": "qwen2_5_omni, audio in video",
                    **{"batch": 8, "width": 10094, "tokens": 45893, "items": 40},
                    **{"ours_us": 216.0, "transformers_us": 176720.0, "speedup": speedup, "target_met": True},
                }
            ],
        }
    )
    run = {"import_s": 1.06, "warmup_s": 17.79, "all_warmup_s": [17.5, 17.79, 18.2]}
    startup = suite_startup.tables(
        {
            "cores": 2,
            "runs": 3,
            "cold": {**run, "stages": {"compile (2 processes)": 17.64, "prompt_positions": 0.08}},
            "warm": {**run, "stages": {"prompt_positions": 0.08}},
        }
    )
    for text in (hf, startup):
        assert max(len(line) for line in text.splitlines()) <= report.WIDTH
        tables = [block.splitlines() for block in text.split("\n\n") if block.startswith("|")]
        assert tables and all(len({len(line) for line in rows}) == 1 for rows in tables)  # aligned columns
    assert "| compile (2 processes) | 17.64 | –" in startup


def test_check_outputs(tmp_path):
    """check_outputs accepts writable file paths and names the flag of a directory or a missing folder."""
    assert report.check_outputs(str(tmp_path / "out.json"), None) is None
    assert report.check_outputs(None, None) is None
    assert report.check_outputs("-", None) is None  # --json - is stdout
    assert report.check_outputs(str(tmp_path), None).startswith("--json")
    assert report.check_outputs(None, str(tmp_path / "missing" / "chart.png")).startswith("--plot")


def test_evs_suite_agrees_with_the_vllm_restatement_and_renders():
    """The suite checks our vllm-0.33 positions against its torch re-statement
    of vLLM's recompute before timing; a quick run must get through that."""
    from mrope_tracker.bench import suite_evs

    result = suite_evs.run(True, lambda message: None)
    assert [row["pruning_rate"] for row in result["rows"]] == list(suite_evs.RATES)
    assert "vLLM-like" in report.markdown({"suites": {"evs": result}})


def test_sglang_suite_agrees_with_sglangs_restated_paths_and_renders():
    """The suite compares every batch mode with its re-statement of SGLang's path (and,
    when SGLang's file is named, the drop-in with SGLang's get_rope_index) before timing."""
    from mrope_tracker.bench import suite_sglang

    result = suite_sglang.run(True, lambda message: None)
    assert [row["batch_size"] for row in result["batches"] if row["mode"] == "decode"] == [1, 8, 64]
    assert all(row["ours_bytes"] < row["sglang_bytes"] for row in result["memory"] if row["tokens"] > 1000)
    assert bool(result["rope_index"]) != bool(result.get("rope_index_note"))
    assert all(row["served_us"] > 0 for row in result["batches"])
    assert "as the plugin calls it" in report.markdown({"suites": {"sglang": result}})


def test_vllm_sources_loader_names_missing_sources(tmp_path):
    from mrope_tracker.bench import vllm_sources

    with pytest.raises(ImportError, match=vllm_sources.ENV):
        vllm_sources.VllmRopeSources(str(tmp_path))
