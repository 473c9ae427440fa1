from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_quick_start_runs(capsys: object) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has a python quick start"
    namespace: dict[str, object] = {"__name__": "readme"}
    exec(compile(blocks[0], str(README), "exec"), namespace)  # noqa: S102 - the README's own code
