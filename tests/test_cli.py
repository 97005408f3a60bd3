"""The command line refuses bad output paths before running anything."""

from mrope_tracker.cli import main


def test_bench_checks_output_paths_first(tmp_path, capsys):
    """`bench --json` into a missing folder exits 2 at once, naming --json."""
    assert main(["bench", "--suite", "prompt", "--json", str(tmp_path / "missing" / "out.json")]) == 2
    assert "--json" in capsys.readouterr().err


def test_bench_refuses_unknown_suites(capsys):
    """An unknown suite exits 2 and lists the suites."""
    assert main(["bench", "--suite", "nope"]) == 2
    assert "startup" in capsys.readouterr().err
