"""Documentation stays true: generated references match, code blocks run."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from turnkeep import _hookdocs, hookspecs
from turnkeep.config import Config
from turnkeep.host import Host

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (
    "Called:",
    "Calling convention:",
    "Args:",
    "Returns:",
    "Contract:",
    "Added in:",
)


def blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.S)


def test_hook_reference_is_generated_from_the_specs() -> None:
    committed = (ROOT / "docs" / "hooks.md").read_text()
    assert committed == _hookdocs.render(), (
        "run `make docs` to regenerate docs/hooks.md"
    )


def test_every_hook_is_specified_documented_and_rendered() -> None:
    host = Host(Config(plugins="none"))
    names = {n for n in dir(host.pm.hook) if not n.startswith("_")}
    assert names == set(hookspecs.HOOK_NAMES)
    reference = (ROOT / "docs" / "hooks.md").read_text()
    for name in names:
        spec = getattr(hookspecs, name)
        doc = inspect.getdoc(spec) or ""
        for section in SECTIONS:
            assert section in doc, f"{name} lacks a {section!r} section"
        assert f"### `{name}{inspect.signature(spec)}`".replace("'", "") in reference


def test_readme_quick_start_runs() -> None:
    (code,) = blocks(ROOT / "README.md", "python")
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})  # noqa: S102 - our own README


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_the_quick_start_runs_on_the_backends_its_comment_names(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (code,) = blocks(ROOT / "README.md", "python")
    line = next(x for x in code.splitlines() if "#" in x and f'"{backend}"' in x)
    assert '"memory"' in code, line
    for variable in ("XDG_DATA_HOME", "XDG_STATE_HOME"):  # the default stores
        monkeypatch.setenv(variable, str(tmp_path / variable))
    code = code.replace('"persistence": "memory"', f'"persistence": "{backend}"')
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})  # noqa: S102 - our own README
    assert any((tmp_path / "XDG_DATA_HOME").rglob("*")) or any(
        (tmp_path / "XDG_STATE_HOME").rglob("*")
    )


def test_writing_a_backend_registration_and_kit_blocks_compile() -> None:
    kit, registration, conformance = blocks(
        ROOT / "docs" / "writing-a-backend.md", "python"
    )
    compile(registration, "writing-a-backend.md", "exec")
    namespace: dict[str, object] = {}
    exec(compile(kit, "writing-a-backend.md", "exec"), namespace)  # noqa: S102 - our own docs
    assert callable(namespace["MyPersistence"])
    assert "class TestMyBackend(PersistenceContract)" in conformance


@pytest.mark.slow
def test_a_backend_test_file_is_one_subclass_and_one_fixture(
    pytester: pytest.Pytester,
) -> None:
    *_, conformance = blocks(ROOT / "docs" / "writing-a-backend.md", "python")
    pytester.makeini(
        "[pytest]\nasyncio_mode = strict\n"
        "asyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(test_mine=conformance)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert result.parseoutcomes()["passed"] >= 50


def test_configuration_example_is_valid(tmp_path: Path) -> None:
    from turnkeep.config import load_config

    (toml,) = blocks(ROOT / "docs" / "configuration.md", "toml")
    (tmp_path / "turnkeep.toml").write_text(toml)
    config = load_config(tmp_path, env={})
    assert config.persistence == "sqlite"
    assert "path" in config.backends["sqlite"]
    assert config.retention is not None
    assert config.retention.older_than.days == 30


NOT_RUN = ("# fragment", "# not run")
"""A block starting with one of these says so on the page, and only compiles."""


def _python_blocks() -> list[tuple[str, int, str]]:
    found: list[tuple[str, int, str]] = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        for match in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
            line = text[: match.start()].count("\n") + 2
            found.append((str(path.relative_to(ROOT)), line, match.group(1)))
    return found


@pytest.mark.parametrize(
    ("page", "line", "code"),
    _python_blocks(),
    ids=[f"{page}:{line}" for page, line, _ in _python_blocks()],
)
def test_every_python_block_in_the_docs_runs_as_written(
    page: str,
    line: int,
    code: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ast

    name = f"{page}:{line}"
    if code.startswith(NOT_RUN):
        # Fragments of a page's running example: they must still parse.
        compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        return
    monkeypatch.chdir(tmp_path)  # relative store paths land here
    for variable in ("XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(variable, str(tmp_path / variable))
    exec(compile(code, name, "exec"), {"__name__": "__main__"})  # noqa: S102 - our own docs


def test_blocks_that_do_not_run_are_few_and_marked() -> None:
    marked = [(p, n) for p, n, code in _python_blocks() if code.startswith(NOT_RUN)]
    pages = {p for p, _ in marked}
    # The agent loop's page is one running example in fragments; elsewhere
    # only what needs a network model or a test runner.
    assert pages <= {
        "docs/agent-loop.md",
        "docs/openai-agents.md",
        "docs/writing-a-backend.md",
    }, marked
