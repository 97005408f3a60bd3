"""The command line: one `--json [PATH]` convention, bad output paths refused before running anything."""

import json
import pathlib

import pytest

from mrope_tracker.cli import main

COMPARE = ["compare", "qwen2_vl", "--num-prompts", "4", "--presets", "reference,transformers-5"]


def test_bench_checks_output_paths_first(tmp_path, capsys):
    """`bench --json` into a missing folder exits 2 at once, naming --json."""
    assert main(["bench", "--suite", "prompt", "--json", str(tmp_path / "missing" / "out.json")]) == 2
    assert "--json" in capsys.readouterr().err


def test_bench_refuses_unknown_suites(capsys):
    """An unknown suite exits 2 and lists the suites."""
    assert main(["bench", "--suite", "nope"]) == 2
    assert "startup" in capsys.readouterr().err


def test_compare_json_path_writes_the_file_and_prints_the_table(tmp_path, capsys):
    """`compare --json PATH` writes the JSON there and still prints the Markdown table, as `bench` does."""
    path = tmp_path / "compare.json"
    assert main([*COMPARE, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| presets |" in out and not out.lstrip().startswith("{")
    result = json.loads(path.read_text(encoding="utf-8"))
    assert result["prompts"] == 4 and len(result["pairs"]) == 1


def test_compare_json_dash_prints_json_on_stdout(capsys):
    """`compare --json -` (and a bare `--json`) put the JSON alone on stdout, the table on stderr."""
    for flag in (["--json", "-"], ["--json"]):
        assert main([*COMPARE, *flag]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out)["prompts"] == 4
        assert "| presets |" in captured.err


def test_compare_checks_the_json_path_first(tmp_path, capsys):
    """`compare --json` into a missing folder exits 2 before comparing, naming --json."""
    assert main([*COMPARE, "--json", str(tmp_path / "missing" / "out.json")]) == 2
    assert "--json" in capsys.readouterr().err


def test_bench_help_lists_every_suite(capsys):
    """`bench --help` names every suite of the registry, and the registry holds every bench/suite_*.py."""
    from mrope_tracker.bench import SUITES

    bench_dir = pathlib.Path(__file__).resolve().parent.parent / "bench"
    assert sorted(SUITES) == sorted(p.stem.removeprefix("suite_") for p in bench_dir.glob("suite_*.py"))
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name, what in SUITES.items():
        assert f"  {name}" in out and what in out, name


def test_compare_exits_1_naming_a_malformed_prompt(tmp_path, capsys):
    """A prompt every preset refuses (an image grid its tokens do not fill) exits 1 with the reason on stderr."""
    path = tmp_path / "prompts.jsonl"
    good = {"token_ids": [1, 151652, 151655, 151653, 2], "image_grid_thw": [[1, 2, 2]]}
    bad = {"token_ids": [1, 151652, 151655, 151653, 2], "image_grid_thw": [[1, 4, 4]]}
    path.write_text(f"{json.dumps(good)}\n{json.dumps(bad)}\n", encoding="utf-8")
    assert main(["compare", "qwen2_vl", "--prompts", str(path), "--presets", "reference,vllm-0.33"]) == 1
    err = capsys.readouterr().err
    assert "refused (reference 1, vllm-0.33 1, of 2)" in err
    assert "prompt 1 (from 0), by reference, vllm-0.33: ValueError: token_ids: image_grid_thw[0]" in err
    path.write_text(f"{json.dumps(good)}\n", encoding="utf-8")  # the same file, well formed: exit 0
    assert main(["compare", "qwen2_vl", "--prompts", str(path), "--presets", "reference,vllm-0.33"]) == 0


def test_compare_exits_2_on_a_value_that_is_no_number(tmp_path, capsys):
    """A grid or token id that is not a number exits 2, naming the field and the line."""
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"token_ids": [1, 2]}\n{"token_ids": ["a", 2]}\n', encoding="utf-8")
    assert main(["compare", "qwen2_vl", "--prompts", str(path)]) == 2
    assert "prompts: token_ids on line 2: expected integers" in capsys.readouterr().err
