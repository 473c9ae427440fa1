from __future__ import annotations

from pathlib import Path

import pytest

from turnkeep.config import Config, load_config
from turnkeep.errors import ConfigurationError


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_without_any_source(tmp_path: Path) -> None:
    assert load_config(tmp_path, env={}) == Config()


def test_precedence_turnkeep_toml_then_pyproject_then_environment(
    tmp_path: Path,
) -> None:
    write(
        tmp_path / "pyproject.toml",
        '[tool.turnkeep]\npersistence = "sqlite"\nmax_event_bytes = 10\n',
    )
    env = {
        "TURNKEEP_PERSISTENCE": "memory",
        "TURNKEEP_MAX_EVENT_BYTES": "20",
        "TURNKEEP_BLOCKED_PLUGINS": "a, b",
    }
    config = load_config(tmp_path, env=env)
    assert (config.persistence, config.max_event_bytes) == ("sqlite", 10)
    assert config.blocked_plugins == ("a", "b")
    write(tmp_path / "turnkeep.toml", 'persistence = "jsonl"\n')
    config = load_config(tmp_path, env=env)
    assert (config.persistence, config.max_event_bytes) == ("jsonl", 10)
    assert (
        load_config(tmp_path, env=env, overrides={"persistence": "x"}).persistence
        == "x"
    )


def test_backend_tables_merge_per_key(tmp_path: Path) -> None:
    write(tmp_path / "turnkeep.toml", '[backends.sqlite]\npath = "/db"\n')
    env = {"TURNKEEP_SQLITE__PATH": "/ignored", "TURNKEEP_SQLITE__BUSY_TIMEOUT": "5"}
    config = load_config(tmp_path, env=env)
    assert config.backends == {"sqlite": {"path": "/db", "busy_timeout": "5"}}


def test_files_are_found_in_parent_directories(tmp_path: Path) -> None:
    write(tmp_path / "turnkeep.toml", 'persistence = "memory"\n')
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    assert load_config(nested, env={}).persistence == "memory"


def test_a_pyproject_without_a_turnkeep_table_is_skipped(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.turnkeep]\npersistence = "memory"\n')
    inner = tmp_path / "inner"
    inner.mkdir()
    write(inner / "pyproject.toml", '[project]\nname = "x"\n')
    assert load_config(inner, env={}).persistence == "memory"


@pytest.mark.parametrize(
    ("where", "text", "needle"),
    [
        ("turnkeep.toml", "persistance = 'sqlite'\n", "persistance"),
        (
            "pyproject.toml",
            "[tool.turnkeep]\nmax_event_bytes = 'lots'\n",
            "max_event_bytes",
        ),
        ("turnkeep.toml", "max_event_bytes = -1\n", "must be > 0"),
        ("turnkeep.toml", "plugins = 3\n", "plugins"),
        ("turnkeep.toml", "persistence = [\n", "cannot read"),
    ],
)
def test_bad_files_name_their_source(
    tmp_path: Path, where: str, text: str, needle: str
) -> None:
    path = write(tmp_path / where, text)
    with pytest.raises(ConfigurationError) as info:
        load_config(tmp_path, env={})
    assert needle in str(info.value)
    assert str(path) in str(info.value)


def test_bad_environment_values_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="environment variables"):
        load_config(tmp_path, env={"TURNKEEP_MAX_EVENT_BYTES": "many"})


def test_unrelated_turnkeep_variables_are_not_configuration(tmp_path: Path) -> None:
    env = {"TURNKEEP_TEST_POSTGRES_DSN": "postgresql://x", "TURNKEEP_PLUGINS": "none"}
    assert load_config(tmp_path, env=env).plugins == "none"


@pytest.mark.parametrize(
    ("variable", "meant"),
    [
        ("TURNKEEP_PERSISTANCE", "TURNKEEP_PERSISTENCE"),
        ("TURNKEEP_PLUGIN", "TURNKEEP_PLUGINS"),
        ("TURNKEEP_MAX_EVENT_BYTE", "TURNKEEP_MAX_EVENT_BYTES"),
    ],
)
def test_a_misspelt_setting_variable_is_an_error(
    tmp_path: Path, variable: str, meant: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_config(tmp_path, env={variable: "sqlite"})
    assert f"{variable} is not a turnkeep setting; did you mean {meant}?" in str(
        info.value
    )


def test_plugin_selection_forms(tmp_path: Path) -> None:
    for value, expected in (("all", "all"), ("none", "none"), ("a,b", ("a", "b"))):
        assert (
            load_config(tmp_path, env={"TURNKEEP_PLUGINS": value}).plugins == expected
        )
    write(tmp_path / "turnkeep.toml", 'plugins = ["jsonl"]\n')
    assert load_config(tmp_path, env={}).plugins == ("jsonl",)


def test_a_variable_a_file_overrides_is_warned_once_naming_both(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from turnkeep import envshadow

    envshadow._warned.clear()  # pyright: ignore[reportPrivateUsage] - a fresh process
    toml = write(
        tmp_path / "turnkeep.toml",
        'persistence = "jsonl"\n[backends.jsonl]\npath = "/from/file"\n'
        "[serve]\nport = 9000\n",
    )
    env = {
        "TURNKEEP_JSONL__PATH": "/from/env",
        "TURNKEEP_PERSISTENCE": "jsonl",  # the same value: nothing to say
        "TURNKEEP_SERVE__PORT": "9001",
        "TURNKEEP_SQLITE__PATH": "/only/in/env",  # no file sets it
        "TURNKEEP_OPENAI_API_KEY": "not a setting",
    }
    caplog.set_level("WARNING", logger="turnkeep.config")
    config = load_config(tmp_path, env=env)
    assert config.backends["jsonl"]["path"] == "/from/file"  # ADR 5's order stands
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        f"turnkeep: TURNKEEP_JSONL__PATH=/from/env is overridden by {toml}, which "
        "sets jsonl.path = '/from/file' (files take precedence over the "
        "environment); remove one of them",
        f"turnkeep: TURNKEEP_SERVE__PORT=9001 is overridden by {toml}, which sets "
        "serve.port = 9000 (files take precedence over the environment); remove "
        "one of them",
    ]
    caplog.clear()
    load_config(tmp_path, env=env)
    assert caplog.records == [], "once per variable and file in a process"


def test_arguments_overriding_a_variable_are_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="turnkeep.config")
    env = {"TURNKEEP_PERSISTENCE": "sqlite"}
    config = load_config(tmp_path, env=env, overrides={"persistence": "memory"})
    assert config.persistence == "memory"
    assert caplog.records == []
