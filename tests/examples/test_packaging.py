"""Each example installs on its own: it depends on the backend it configures.

An example's `turnkeep.toml` picks its persistence backend (or leaves the
default); the plugin providing that backend must be among the example's
own dependencies, or the example installed alone fails with "backend ...
is not registered".
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from turnkeep.config import DEFAULT_BACKEND

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _requirement_names(example: Path) -> set[str]:
    project = tomllib.loads((example / "pyproject.toml").read_text())["project"]
    return {
        re.split(r"[\s\[<>=!~;]", dep, maxsplit=1)[0] for dep in project["dependencies"]
    }


def _configured_backend(example: Path) -> str:
    toml = example / "turnkeep.toml"
    if not toml.exists():
        return DEFAULT_BACKEND
    return str(tomllib.loads(toml.read_text()).get("persistence", DEFAULT_BACKEND))


@pytest.mark.parametrize("name", ["echo_agent", "coding_agent"])
def test_an_example_depends_on_the_backend_it_configures(name: str) -> None:
    example = EXAMPLES / name
    backend = _configured_backend(example)
    assert f"turnkeep-{backend}" in _requirement_names(example), (
        f"examples/{name} configures {backend!r} but does not depend on "
        f"turnkeep-{backend}"
    )


def test_every_example_with_a_configuration_is_checked() -> None:
    configured = {p.parent.name for p in EXAMPLES.glob("*/turnkeep.toml")}
    assert configured <= {"echo_agent", "coding_agent"}
