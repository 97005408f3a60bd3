"""The runnable examples run (they check their own positions as they go)."""

import pathlib
import runpy

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def test_model_runner_example(capsys):
    """examples/model_runner.py runs on the CPU and reports every step matched."""
    module = runpy.run_path(str(EXAMPLES / "model_runner.py"))
    module["main"](["--device", "cpu"])
    assert "ok: every step matched" in capsys.readouterr().out
