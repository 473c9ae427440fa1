"""CI and the test tooling: no green run without the PostgreSQL and browser tests.

- `.ci/run` stops with an error when the installed server will not start,
  and otherwise runs `make test` with `TURNKEEP_REQUIRE_POSTGRES=1` and
  `TURNKEEP_REQUIRE_LITELLM=1` (LiteLLM's proxy tests may not skip). It runs
  here with stand-in `pg_ctlcluster`, `make` and `apt-get` commands first on
  `PATH`, so the machine's server and packages are never touched and the
  suite does not recurse.
- `.ci/run` requires the browser tests (`TURNKEEP_REQUIRE_CHROMIUM=1`);
  elsewhere they skip where Chromium is missing, naming its install.
- `tests/support/skipguard.py` fails a run in which a `postgres` test
  skipped where PostgreSQL is required, a `browser` test where Chromium
  is, or a `litellm` test where LiteLLM's proxy is (checked in pytester
  runs).
- `tests/support/litellm_proxy.py` starts LiteLLM's proxy again when it
  exits while starting (its port taken meanwhile), and says why it gave up.
- `tests/support/timing.py` sums test time by directory under `--durations`.
- `make test-fast` keeps core, the loop, the memory backend's conformance
  and a JSONL and a SQLite smoke test, and every entry it names exists.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
CI_RUN = ROOT / ".ci" / "run"
MAKE = (
    "#!/bin/sh\n"
    'echo "make $* REQUIRE=${TURNKEEP_REQUIRE_POSTGRES:-unset}'
    " CHROMIUM=${TURNKEEP_REQUIRE_CHROMIUM:-unset}"
    " LITELLM=${TURNKEEP_REQUIRE_LITELLM:-unset}"
    " CGROUP=${TURNKEEP_REQUIRE_CGROUP:-unset}"
    " CC=${TURNKEEP_REQUIRE_CC:-unset}"
    " ROOT=${TURNKEEP_REQUIRE_ROOT:-unset}"
    ' USERNS=${TURNKEEP_REQUIRE_USERNS:-unset}"\n'
)
APT = "#!/bin/sh\nexit 0\n"
PG_UP = '#!/bin/sh\n[ "$3" = status ] && exit 3\nexit 0\n'
"""`pg_ctlcluster`: "status" says down (3), "start" succeeds."""
ROOT_ID = "#!/bin/sh\necho 0\n"
USERNS = "#!/bin/sh\nexit 0\n"
_REQUIRED = (
    "TURNKEEP_REQUIRE_POSTGRES",
    "TURNKEEP_REQUIRE_CHROMIUM",
    "TURNKEEP_REQUIRE_LITELLM",
    "TURNKEEP_REQUIRE_CGROUP",
    "TURNKEEP_REQUIRE_CC",
    "TURNKEEP_REQUIRE_ROOT",
    "TURNKEEP_REQUIRE_USERNS",
)


def _run_ci(
    tmp_path: Path,
    pg_ctlcluster: str,
    *,
    apt: str = APT,
    user_id: str = ROOT_ID,
    unshare: str = USERNS,
    only_stubs: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `.ci/run` with stand-ins for what it starts, installs and probes.

    `only_stubs`: `PATH` holds the stand-ins and the few tools the script
    uses, and no C compiler (`cc`, `gcc`).
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # apt-get too: on a machine without Chromium, `.ci/run` installs it, and a
    # test must not install packages (nor print apt's output into stdout).
    stubs = (
        ("make", MAKE),
        ("pg_ctlcluster", pg_ctlcluster),
        ("apt-get", apt),
        ("id", user_id),
        ("unshare", unshare),
    )
    for name, text in stubs:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in _REQUIRED}
    if only_stubs:
        for tool in ("dirname", "ls", "head", "chmod"):
            found = shutil.which(tool)
            assert found is not None, tool
            (bin_dir / tool).symlink_to(found)
        env["PATH"] = str(bin_dir)
    else:
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        ["/bin/sh", str(CI_RUN)], capture_output=True, text=True, env=env, check=False
    )


def test_ci_stops_when_the_installed_server_will_not_start(tmp_path: Path) -> None:
    # "status" says the server is down; "start" fails.
    done = _run_ci(tmp_path, "#!/bin/sh\nexit 1\n")
    assert done.returncode != 0
    assert "PostgreSQL" in done.stderr
    assert "make" not in done.stdout, "the tests ran without a server"


def test_ci_requires_the_postgres_tests_once_the_server_runs(tmp_path: Path) -> None:
    done = _run_ci(tmp_path, PG_UP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "make test REQUIRE=1 CHROMIUM=1 LITELLM=1 CGROUP=1 CC=1 ROOT=1 USERNS=1"
    )


def test_ci_says_what_it_cannot_require(tmp_path: Path) -> None:
    # Not root, and no user namespaces: those tests skip, and CI says so.
    done = _run_ci(
        tmp_path, PG_UP, user_id="#!/bin/sh\necho 1000\n", unshare="#!/bin/sh\nexit 1\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("CC=1 ROOT=unset USERNS=unset")
    assert "not root" in done.stderr
    assert "no user namespaces" in done.stderr


def test_ci_installs_a_missing_c_compiler_and_requires_it(tmp_path: Path) -> None:
    # The stand-in apt-get "installs" gcc as a `cc` on PATH.
    apt = (
        "#!/bin/sh\n"
        'case "$*" in *gcc*) printf "#!/bin/sh\\n" > "$(dirname "$0")/cc"; '
        'chmod +x "$(dirname "$0")/cc"; echo "installed $*" >&2;; esac\nexit 0\n'
    )
    done = _run_ci(tmp_path, PG_UP, apt=apt, only_stubs=True)
    assert done.returncode == 0, done.stderr
    assert "installed install -y gcc libc6-dev" in done.stderr
    assert (tmp_path / "bin" / "cc").exists()
    assert " CC=1 " in done.stdout


def test_ci_stops_when_no_c_compiler_will_install(tmp_path: Path) -> None:
    apt = '#!/bin/sh\ncase "$*" in *gcc*) exit 100;; esac\nexit 0\n'
    done = _run_ci(tmp_path, PG_UP, apt=apt, only_stubs=True)
    assert done.returncode == 1
    assert "C compiler" in done.stderr
    assert "make" not in done.stdout, "the tests ran without a compiler"


GUARDED = """
import pytest

@pytest.mark.postgres
def test_needs_the_server():
    pytest.skip("pretend the server is down")

@pytest.mark.postgres
@pytest.mark.soak
def test_soak_size():
    pytest.skip("soak tier")

@pytest.mark.browser
def test_needs_chromium():
    pytest.skip("pretend Chromium is missing")

def test_other():
    pass
"""


def _guarded_run(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    *,
    required: bool,
    browser: bool = False,
) -> pytest.RunResult:
    from tests.support import chromium, pgserver

    monkeypatch.setattr(pgserver, "required", lambda: required)
    monkeypatch.setattr(chromium, "required", lambda: browser)
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "markers =\n    postgres: x\n    soak: x\n    browser: x\n"
    )
    pytester.makepyfile(GUARDED)
    return pytester.runpytest_inprocess("-p", "tests.support.skipguard")


def test_a_skipped_postgres_test_fails_the_run_where_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _guarded_run(pytester, monkeypatch, required=True)
    result.assert_outcomes(passed=1, skipped=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*PostgreSQL is required here*", "*test_needs_the_server: Skipped*"]
    )
    listed = result.stdout.str().split("required here")[1]
    assert "test_soak_size" not in listed
    assert "test_needs_chromium" not in listed
    assert "Chromium is required" not in result.stdout.str()


def test_a_skipped_browser_test_fails_the_run_where_chromium_is_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _guarded_run(pytester, monkeypatch, required=False, browser=True)
    result.assert_outcomes(passed=1, skipped=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*Chromium is required here*", "*test_needs_chromium: Skipped*"]
    )
    assert "PostgreSQL is required" not in result.stdout.str()


def test_the_browser_tests_skip_without_chromium_and_fail_where_required(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.support import chromium

    monkeypatch.setattr(chromium, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv(chromium.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium"):
        chromium.require_chromium()
    monkeypatch.setenv(chromium.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium"):
        chromium.require_chromium()
    (tmp_path / "no-chromium").touch()
    assert chromium.require_chromium() == tmp_path / "no-chromium"


LITELLM_GUARDED = """
import pytest

@pytest.mark.litellm
def test_needs_the_proxy():
    pytest.skip("pretend the proxy would not start")
"""


@pytest.mark.parametrize("required", [True, False])
def test_a_skipped_proxy_test_fails_the_run_where_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, required: bool
) -> None:
    from tests.support import litellm_proxy, pgserver

    monkeypatch.setattr(pgserver, "required", lambda: True)
    if required:
        monkeypatch.setenv(litellm_proxy.REQUIRE_VARIABLE, "1")
    else:
        monkeypatch.delenv(litellm_proxy.REQUIRE_VARIABLE, raising=False)
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "markers =\n    litellm: x\n"
    )
    pytester.makepyfile(LITELLM_GUARDED)
    result = pytester.runpytest_inprocess("-p", "tests.support.skipguard")
    result.assert_outcomes(skipped=1)
    if required:
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines(["*LiteLLM's proxy is required here*"])
    else:
        assert result.ret == pytest.ExitCode.OK


def test_skipped_postgres_tests_pass_where_none_is_installed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _guarded_run(pytester, monkeypatch, required=False)
    result.assert_outcomes(passed=1, skipped=3)
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.parametrize(
    ("nodeid", "group"),
    [
        ("tests/core/test_codec.py::test_x", "tests/core"),
        ("tests/plugins/jsonl/test_kill.py::test_x[3]", "tests/plugins/jsonl"),
        ("tests/loop/test_loop.py::TestA::test_b", "tests/loop"),
        ("tests/test_docs.py::test_x", "tests"),
    ],
)
def test_test_time_is_grouped_by_directory(nodeid: str, group: str) -> None:
    from tests.support.timing import group_of

    assert group_of(nodeid) == group


def test_the_group_summary_prints_only_with_durations(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.mkdir("tests")
    pytester.mkdir("tests/core")
    pytester.makepyfile(**{"tests/core/test_a": "def test_a(): pass\n"})
    pytester.makepyfile(**{"tests/test_b": "def test_b(): pass\ndef test_c(): pass\n"})
    quiet = pytester.runpytest_inprocess("-p", "tests.support.timing")
    assert "time by test group" not in quiet.stdout.str()
    result = pytester.runpytest_inprocess("-p", "tests.support.timing", "--durations=1")
    out = result.stdout.str().split("time by test group")[1]
    lines = [line.split() for line in out.splitlines()[1:4]]
    assert sorted(line[1:] for line in lines) == [
        ["tests", "2", "tests"],
        ["tests/core", "1", "tests"],
        ["total"],
    ]


def _make_variable(name: str) -> list[str]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if line.startswith(f"{name} :="):
            return line.split(":=", 1)[1].split()
    raise AssertionError(f"no {name} in the Makefile")


def test_test_fast_covers_core_and_a_smoke_of_each_embedded_backend() -> None:
    from turnkeep.conformance import PersistenceContract

    paths = _make_variable("FAST_TESTS")
    core = {"tests/core", "tests/loop", "tests/conformance/test_memory.py"}
    assert core <= set(paths)
    for backend in ("jsonl", "sqlite"):
        assert any(p.startswith(f"tests/plugins/{backend}/") for p in paths), backend
    for path in paths:  # a stale entry would make pytest stop with "not found"
        file, _, node = path.partition("::")
        assert (ROOT / file).exists(), f"{file} does not exist"
        test = node.rsplit("::", 1)[-1]
        if test:
            defined = f"def {test}(" in (ROOT / file).read_text()
            assert defined or hasattr(PersistenceContract, test), f"no test {path}"


def test_the_proxy_helper_retries_an_early_exit_then_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support import litellm_proxy

    starts = tmp_path / "starts"
    script = tmp_path / "litellm"
    script.write_text(f"#!/bin/sh\necho started >> {starts}\necho boom\nexit 3\n")
    script.chmod(0o755)
    monkeypatch.setattr(litellm_proxy, "_executable", lambda: script)
    with (
        pytest.raises(litellm_proxy.ProxyUnavailable, match="exited while starting"),
        litellm_proxy.start_proxy(tmp_path / "proxy"),
    ):
        pass
    assert starts.read_text().split() == ["started"] * 3
    script.write_text(f"#!/bin/sh\necho '{litellm_proxy.READY} x'\nexec sleep 60\n")
    with litellm_proxy.start_proxy(tmp_path / "again") as proxy:
        assert proxy.base_url.startswith("http://127.0.0.1:")
        assert proxy.requests("anything") == 0


def test_a_missing_need_skips_and_fails_where_ci_promised_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.support import needs

    monkeypatch.setattr(needs.shutil, "which", lambda _name: None)
    monkeypatch.setattr(needs.os, "geteuid", lambda: 1000)
    from coding_agent import cgroups

    monkeypatch.setattr(cgroups, "base", lambda: None)
    checks = (
        ("CC", needs.c_compiler, "C compiler"),
        ("ROOT", lambda: needs.root("to switch to nobody"), "needs root"),
        ("USERNS", needs.user_namespaces, "namespaces"),
        ("CGROUP", needs.cgroup, "cgroup v2"),
    )
    for name, check, reason in checks:
        monkeypatch.setattr(needs, "_PROMISED", frozenset())
        with pytest.raises(pytest.skip.Exception, match=reason):
            check()
        monkeypatch.setattr(needs, "_PROMISED", frozenset({name}))
        with pytest.raises(pytest.fail.Exception, match=f"TURNKEEP_REQUIRE_{name}=1"):
            check()


def _mutate_script() -> ModuleType:
    path = ROOT / "scripts" / "mutate.py"
    spec = importlib.util.spec_from_file_location("turnkeep_mutate_script", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def _recipe(target: str) -> str:
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    body = [line for line in lines[start + 1 :] if line.startswith("\t")]
    return "\n".join(body[:1])


def test_make_mutate_names_what_exists_and_stays_out_of_make_test() -> None:
    mutate = _mutate_script()
    assert {a.name for a in mutate.AREAS} == {
        "jsonl",
        "sqlite",
        "postgres",
        "writebehind",
        "gate",
        "guard",
    }
    for area in mutate.AREAS:
        for path in (*area.modules, *area.tests):
            # A file renamed away would make the area mutate nothing, or
            # kill every mutant with "file not found".
            assert (ROOT / path).is_file(), f"{area.name}: {path} does not exist"
        config = tomllib.loads(mutate.config_text(area, 60.0))["cosmic-ray"]
        assert config["module-path"] == list(area.modules)
        command = shlex.split(config["test-command"])
        assert command[-len(area.tests) :] == list(area.tests)
        assert "-x" in command  # the first failing test kills the mutant
        excluded = config["filters"]["operators-filter"]["exclude-operators"]
        assert excluded == list(mutate.SKIPPED_OPERATORS)
    assert "scripts/mutate.py" in _recipe("mutate")
    assert "mutate" not in _recipe("test")
    assert "mutate" not in _recipe("test-fast")
