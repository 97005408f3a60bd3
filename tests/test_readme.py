"""The README's Python examples run as written, and its Quickstart has exactly two commands."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_examples_run():
    """Every ```python block of the README executes, in order, in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102
    assert namespace["delta"] == -306
    assert namespace["out"][:, :4].tolist() == [[72, 73, 74, 75]] * 3


def test_quickstart_has_two_commands():
    """The Quickstart block holds two commands: run the main job, run the tests (what .ci/run calls)."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Quickstart") :]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(commands) == 2
    assert "mrope-tracker bench" in commands[0] and "pytest" in commands[1]
