"""`mrope-tracker compare` and `mrope_tracker.hf.compare`: which presets differ
on which prompts, and the divergence that explains each difference.

The counts are checked against conditions computed here from the prompts
alone (a video's temporal indices under each arithmetic, its extent against
its frame size), not against the positions the code under test computes.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from family_prompts import CONFIG_DIR

from mrope_tracker import MRopeConfig, prompt_positions
from mrope_tracker.cli import main
from mrope_tracker.hf.compare import compare, markdown
from mrope_tracker.hf.sample import Prompt, read_prompts, sample_prompts

NUM = 60  # prompts of the built-in sample in these tests


@pytest.fixture(scope="module")
def qwen2_5_vl_folder(tmp_path_factory):
    """A model folder holding Qwen2.5-VL-7B's config.json (tokens_per_second 2)."""
    folder = tmp_path_factory.mktemp("qwen2_5_vl")
    shutil.copy(f"{CONFIG_DIR}/qwen2_5_vl.json", folder / "config.json")
    return folder


def _taus(t: int, sp: float, r: float, arithmetic: str) -> list[int]:
    """A video's temporal indices: "float32" trunc((f*sp)*r) in float32, "int_sp" with sp
    truncated first, "float64" int(f * (sp * r)) of the float32 sp."""
    f32 = np.float32(sp)
    if arithmetic == "float64":
        return [int(f * (float(f32) * r)) for f in range(t)]
    if arithmetic == "int_sp":
        f32 = np.float32(np.trunc(f32))
    return [int(np.float32(np.float32(np.float32(f) * f32) * np.float32(r))) for f in range(t)]


def _videos(prompt: Prompt):
    for k in range(0 if prompt.video_grid_thw is None else prompt.video_grid_thw.shape[0]):
        t, h, w = (int(v) for v in prompt.video_grid_thw[k])
        yield t, h // 2, w // 2, float(prompt.second_per_grid_ts[k])


def _exposes(prompt: Prompt, divergence: str, r: float = 2.0) -> bool:
    """Whether the prompt's positions must differ through this one divergence (Qwen2.5-VL)."""
    for t, h, w, sp in _videos(prompt):
        if divergence == "D2" and _taus(t, sp, r, "int_sp") != _taus(t, sp, r, "float32"):
            return True
        if divergence == "D3" and _taus(t, sp, r, "float64") != _taus(t, sp, r, "float32"):
            return True
        if divergence == "D1" and _taus(t, sp, r, "float32")[-1] >= max(h, w):
            return True  # R-max resumes past the last frame, R-hw at s + max(h', w')
    return False


def test_cli_reports_d1_d2_d3_for_qwen2_5_vl_from_a_folder(qwen2_5_vl_folder, capsys):
    """`mrope-tracker compare FOLDER` alone prints a Markdown table naming D1, D2 and D3 on its default sample."""
    assert main(["compare", str(qwen2_5_vl_folder)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ") and " vs " in line}
    assert "D3" in rows["reference vs vllm-0.33"]
    assert "D2" in rows["reference vs transformers-4.57"]
    assert "D1" in rows["reference vs transformers-5"]
    assert "first differing token" in out and "200 prompts" in out
    assert "No model in" not in out  # both transformers lines have Qwen2.5-VL


def test_counts_match_the_divergence_conditions(qwen2_5_vl_folder):
    """Per pair, the prompts labelled D1, D2, D3 are exactly those whose videos expose that divergence."""
    config = MRopeConfig.from_hf_config(qwen2_5_vl_folder)
    for seed in range(20):  # the first seed whose sample exposes all three (D3 is the rarest)
        prompts = sample_prompts(config, NUM, seed)
        if all(any(_exposes(p, d) for p in prompts) for d in ("D1", "D2", "D3")):
            break
    result = compare(qwen2_5_vl_folder, num_prompts=NUM, seed=seed)
    pairs = {(p["a"], p["b"]): p for p in result["pairs"]}
    for (a, b), divergence in (
        (("reference", "vllm-0.33"), "D3"),
        (("reference", "transformers-4.57"), "D2"),
        (("reference", "transformers-5"), "D1"),
    ):
        expected = sum(_exposes(p, divergence) for p in prompts)
        assert expected > 0, divergence
        assert pairs[(a, b)]["differ"] == expected
        assert pairs[(a, b)]["divergences"] == {divergence: expected}
    # transformers 4.57 against 5: D1 and D2 alone or together, each prompt once
    both = pairs[("transformers-4.57", "transformers-5")]
    d1 = sum(_exposes(p, "D1") for p in prompts)
    d2 = sum(_exposes(p, "D2") for p in prompts)
    counts = both["divergences"]
    assert set(counts) <= {"D1", "D2", "D1+D2"}
    assert counts.get("D1", 0) + counts.get("D1+D2", 0) <= d1 and counts.get("D2", 0) + counts.get("D1+D2", 0) <= d2


def test_example_is_the_first_differing_token(qwen2_5_vl_folder):
    """The example names a prompt and the first token where the two presets' positions differ."""
    result = compare(qwen2_5_vl_folder, num_prompts=NUM, seed=3, presets=("reference", "transformers-5"))
    example = result["pairs"][0]["example"]
    prompt = sample_prompts(MRopeConfig.from_hf_config(qwen2_5_vl_folder), NUM, 3)[example["prompt"]]
    assert _exposes(prompt, "D1")
    ids = prompt.token_ids
    # D1 moves only what follows a video: the first differing token sits after the first exposing video's end
    first_video = int(np.flatnonzero(ids == 151656)[0])
    assert example["token"] > first_video and example["a"] != example["b"]


# Qwen3-Omni's sample is the slowest to compare: it runs under -m slow here, and by default in the next test
@pytest.mark.parametrize(
    "config", ["qwen2_5_omni", pytest.param("qwen3_omni_moe", marks=pytest.mark.slow), "glm4v", "qwen3_vl"]
)
def test_every_difference_is_explained(config):
    """On each family's sample, no preset refuses a prompt and every difference has a named divergence."""
    result = compare(f"{CONFIG_DIR}/{config}.json", num_prompts=40, seed=1)
    assert not any(result["refused"].values())
    for pair in result["pairs"]:
        assert "unexplained" not in pair["divergences"], pair
        assert sum(pair["divergences"].values()) == pair["differ"]


def test_omni_divergences_are_the_documented_ones():
    """Qwen2.5-Omni: vLLM 0.33 differs by D5 (D6 with empty chunks); Qwen3-Omni by D8 (and D3), SGLang 0.5 by
    its float32 carry (S1); transformers agree."""
    result = compare(f"{CONFIG_DIR}/qwen2_5_omni.json", num_prompts=40, seed=1)
    pairs = {(p["a"], p["b"]): p for p in result["pairs"]}
    assert pairs[("reference", "vllm-0.33")]["differ"] > 0
    assert set(pairs[("reference", "vllm-0.33")]["divergences"]) <= {"D5", "D5+D6", "D3", "D3+D5", "D3+D5+D6"}
    assert pairs[("transformers-4.57", "transformers-5")]["differ"] == 0
    result = compare(f"{CONFIG_DIR}/qwen3_omni_moe.json", num_prompts=40, seed=1)
    for pair in result["pairs"]:
        assert all(set(name.split("+")) <= {"D8", "D3", "S1"} for name in pair["divergences"]), pair
    assert any(p["b"] == "sglang-0.5" and "S1" in p["divergences"] for p in result["pairs"])


@pytest.mark.parametrize("config", ["ernie4_5_vl_moe", "ernie4_5_moe_vl"])
def test_ernie_differs_from_transformers_5_by_d1_exactly_where_a_video_outlasts_its_frame(config):
    """ERNIE-4.5-VL: vLLM 0.33 and the reference agree; transformers 5 differs by D1 on exactly the prompts with a
    video of more temporal patches than max(h', w') (its last patch reaches past s + max(h', w'))."""
    result = compare(f"{CONFIG_DIR}/{config}.json", num_prompts=NUM, seed=2)
    prompts = sample_prompts(MRopeConfig.from_hf_config(f"{CONFIG_DIR}/{config}.json"), NUM, 2)
    exposed = 0
    for p in prompts:
        grids = [] if p.video_grid_thw is None else p.video_grid_thw.tolist()
        exposed += any(t // 2 > max(h, w) // 2 for t, h, w in grids)  # t frames -> t / 2 temporal patches
    assert 0 < exposed < NUM
    pairs = {(p["a"], p["b"]): p for p in result["pairs"]}
    for pair in (("reference", "vllm-0.33"), ("reference", "transformers-4.57")):
        assert pairs[pair]["differ"] == 0
    for pair in (("reference", "transformers-5"), ("vllm-0.33", "transformers-5")):
        assert pairs[pair]["divergences"] == {"D1": exposed}
    assert result["no_model"] == ["transformers-4.57"]  # ERNIE-4.5-VL is in transformers 5 only
    assert "No model in transformers-4.57" in markdown(result)


def test_ernie_d1_example_of_the_docs():
    """docs/semantics.md 2.8, token for token: 8 frames (8, 2, 4) -> 4x1x2 patches; vLLM 0.33 and the reference
    resume at one past the last patch, the transformers-5 preset at s + max(h', w')."""
    ids = [1, 101306, *[100295] * 8, 101307, 2]
    config = f"{CONFIG_DIR}/ernie4_5_moe_vl.json"
    expected = {
        "vllm-0.33": (
            [[0, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 7], [0, 1] + [2] * 8 + [6, 7], [0, 1] + [2, 3] * 4 + [6, 7]],
            -4,
        ),
        "transformers-5": (
            [[0, 1, 2, 2, 3, 3, 4, 4, 5, 5, 4, 5], [0, 1] + [2] * 8 + [4, 5], [0, 1] + [2, 3] * 4 + [4, 5]],
            -6,
        ),
    }
    for semantics, (rows, delta) in expected.items():
        positions, got = prompt_positions(
            MRopeConfig.from_hf_config(config, semantics=semantics), ids, video_grid_thw=[[8, 2, 4]]
        )
        assert positions.tolist() == rows and got == delta, semantics


@pytest.mark.parametrize("config", ["paddleocr_vl", "glm_ocr", "cohere_compass"])
def test_images_and_single_frames_agree_under_every_preset(config):
    """PaddleOCR-VL (images), Cohere Compass and GLM-OCR (images, one-frame blocks): R-hw equals R-max there,
    so transformers 5.24, vLLM 0.33 and the reference agree on every prompt."""
    result = compare(f"{CONFIG_DIR}/{config}.json", num_prompts=NUM, seed=2)
    assert not any(result["refused"].values())
    assert all(pair["differ"] == 0 for pair in result["pairs"]), result["pairs"]


def test_jsonl_prompts_and_json_output(tmp_path, capsys):
    """Prompts from a JSONL file, by model type, printed as JSON: a long video differs under D1 only."""
    c = MRopeConfig(family="qwen2_vl")
    video = [5, c.vision_start_token_id] + [c.video_token_id] * (6 * 4) + [c.vision_end_token_id, 6]
    lines = [
        {"id": "long video", "token_ids": video, "video_grid_thw": [[6, 4, 4]]},
        {"token_ids": [1, 2, 3]},
    ]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n", encoding="utf-8")
    assert main(["compare", "qwen2_vl", "--prompts", str(path), "--json", "--presets", "reference,transformers-5"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["prompts"] == 2 and result["source"] == "file"
    (pair,) = result["pairs"]
    assert pair["differ"] == 1 and pair["divergences"] == {"D1": 1}
    # vision_end follows the video: R-max puts it at 2 + 5 + 1, R-hw at 2 + max(2, 2)
    assert pair["example"] == {
        "prompt": 0,
        "token": 26,
        "a": [8, 8, 8],
        "b": [4, 4, 4],
        "delta_a": -18,
        "delta_b": -20,
        "divergences": "D1",
    }


def test_bad_inputs_exit_2_with_a_message(tmp_path, capsys):
    """An unknown model type, an unknown preset or a bad JSONL key: exit status 2 and a message naming it."""
    assert main(["compare", "qwen9_vl"]) == 2
    assert "config: expected" in capsys.readouterr().err
    assert main(["compare", "qwen2_vl", "--presets", "reference,hf-5"]) == 2
    assert "presets: expected" in capsys.readouterr().err
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"token_ids": [1], "grids": []}) + "\n", encoding="utf-8")
    assert main(["compare", "qwen2_vl", "--prompts", str(path)]) == 2
    assert "unknown keys ['grids']" in capsys.readouterr().err
    with pytest.raises(ValueError, match="token_ids"):
        path.write_text(json.dumps({"ids": [1]}) + "\n", encoding="utf-8")
        read_prompts(path)
