"""The command line: one `--json [PATH]` convention, bad output paths refused before running anything."""

import json

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
