"""Hot reload while iterating on a plugin: `turnkeep dev`.

Runs an agent in this process and watches the source of every plugin its
hosts registered (a package plugin's directory, a module plugin's file).
When one changes, `Host.reload` swaps the plugin for a fresh import on the
host's own event loop: live sessions keep going, and when the plugin
provides the active backend the write-behind cursor carries over, so
nothing is lost or written twice. A reload that fails (a syntax error, say)
leaves the old plugin active and is reported; fix the file and save again.

Two ways to run the agent:

- `turnkeep dev --app module:factory`: `dev` starts a `Host` on the
  configured backend (or `--store`) and calls `factory(host)`, awaiting it
  when it returns an awaitable;
- `turnkeep dev -- COMMAND ...`: a Python program run in this process (a
  console script such as `echo-agent`, `python -m module`, or a `.py` file),
  so that `dev` can see the hosts it starts. `--store` is passed to it as
  `TURNKEEP_*` environment variables (a `turnkeep.toml` that sets
  `persistence` still wins over them).

Hosts are found by wrapping `Host.start` for the duration of the run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import runpy
import sys
import threading
import types
from collections.abc import Callable, Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import click
import watchfiles

from turnkeep.cli.runtime import (
    CliError,
    StoreSpec,
    common_options,
    config_for,
    execute,
    options,
)
from turnkeep.errors import TurnkeepError
from turnkeep.host import Host

__all__ = ["register"]

_CORE: Final = "turnkeep"


def _say(message: str) -> None:
    click.echo(f"turnkeep dev: {message}", err=True)
    sys.stderr.flush()


@attrs.frozen
class _Watched:
    """One plugin of one host, and the source it comes from."""

    host: Host
    loop: asyncio.AbstractEventLoop
    name: str
    root: Path
    package: bool

    def owns(self, path: Path) -> bool:
        return path == self.root or (self.package and self.root in path.parents)


def _source(plugin: object) -> tuple[Path, bool] | None:
    module = (
        plugin
        if isinstance(plugin, types.ModuleType)
        else sys.modules.get(type(plugin).__module__)
    )
    if module is None or module.__name__.split(".")[0] == _CORE:
        return None  # core's own plugins (memory, write-behind) are not reloaded
    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        return None
    path = Path(file).resolve()
    if hasattr(module, "__path__"):
        return path.parent, True
    return path, False


@attrs.define(eq=False)
class _Reloader:
    """Watches plugin sources and reloads them on the hosts that use them."""

    debounce_ms: int
    _watched: list[_Watched] = attrs.field(factory=list[_Watched])
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _stop: threading.Event | None = None
    _thread: threading.Thread | None = None

    def track(self, host: Host, loop: asyncio.AbstractEventLoop) -> None:
        """Watch the plugins of a host that just started."""
        added: list[_Watched] = []
        for name in host.plugin_names():
            found = _source(host.pm.get_plugin(name))
            if found is not None:
                added.append(_Watched(host, loop, name, found[0], found[1]))
        if not added:
            return
        with self._lock:
            self._watched.extend(added)
        self._restart()

    def untrack(self, host: Host) -> None:
        """Stop watching a host that closed."""
        with self._lock:
            self._watched = [w for w in self._watched if w.host is not host]

    def _restart(self) -> None:
        # Never join here: this runs on an event loop thread, which the
        # watcher may be waiting on for a reload. The old watcher stops by
        # itself within its timeout.
        if self._stop is not None:
            self._stop.set()
        with self._lock:
            dirs = {w.root if w.package else w.root.parent for w in self._watched}
        stop = threading.Event()
        thread = threading.Thread(
            target=self._watch,
            args=(sorted(dirs), stop),
            name="turnkeep-dev-watch",
            daemon=True,
        )
        self._stop, self._thread = stop, thread
        thread.start()

    def stop(self) -> None:
        """Stop watching (waits for the watcher thread)."""
        if self._stop is not None:
            self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._stop = self._thread = None

    def _watch(self, dirs: list[Path], stop: threading.Event) -> None:
        with self._lock:
            listed = ", ".join(f"{w.name} ({w.root})" for w in self._watched)
        announced = False
        for changes in watchfiles.watch(
            *dirs,
            watch_filter=lambda _change, path: path.endswith(".py"),
            debounce=self.debounce_ms,
            stop_event=stop,
            rust_timeout=200,
            yield_on_timeout=True,
            raise_interrupt=False,
        ):
            if not announced:
                # Said once the watch is in place: a save from now on is seen.
                _say(f"watching {listed}")
                announced = True
            paths = {Path(p).resolve() for _, p in changes}
            with self._lock:
                due = [w for w in self._watched if any(w.owns(p) for p in paths)]
            for watched in due:
                self._reload(watched)

    def _reload(self, watched: _Watched) -> None:
        if watched.loop.is_closed():
            return
        try:
            future = asyncio.run_coroutine_threadsafe(
                watched.host.reload(watched.name), watched.loop
            )
            while True:
                try:
                    future.result(timeout=0.2)
                    break
                except concurrent.futures.TimeoutError:
                    if not watched.loop.is_running():
                        future.cancel()
                        _say(f"reloading {watched.name} skipped: the agent stopped")
                        return
        except TurnkeepError as exc:
            _say(f"reloading {watched.name} failed: {exc}")
            return
        except RuntimeError as exc:  # the host's loop stopped meanwhile
            _say(f"reloading {watched.name} skipped: {exc}")
            return
        live = len(watched.host.sessions.list())
        _say(f"reloaded {watched.name} ({live} live session(s) kept)")


@contextmanager
def _tracking(reloader: _Reloader) -> Generator[None]:
    """Make every `Host` started meanwhile known to `reloader`."""
    original_start = Host.start
    original_close = Host.aclose

    async def start(self: Host) -> Host:
        started = await original_start(self)
        reloader.track(self, asyncio.get_running_loop())
        return started

    async def aclose(self: Host) -> None:
        reloader.untrack(self)
        await original_close(self)

    # Scoped to this run: the dev command's own process, restored on exit.
    Host.start = start  # type: ignore[method-assign]
    Host.aclose = aclose  # type: ignore[method-assign]
    try:
        yield
    finally:
        Host.start = original_start  # type: ignore[method-assign]
        Host.aclose = original_close  # type: ignore[method-assign]
        reloader.stop()


def _load_factory(target: str) -> Callable[[Host], Any]:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"{target!r} is not module:factory")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise CliError(f"cannot load the app {target!r}: {exc}") from exc
    if not callable(found):
        raise CliError(f"the app {target!r} is not callable")
    return found


def _store_env(spec: StoreSpec | None) -> dict[str, str]:
    if spec is None:
        return {}
    env = {"TURNKEEP_PERSISTENCE": spec.backend}
    for key, value in spec.options.items():
        env[f"TURNKEEP_{spec.backend.upper()}__{key.upper()}"] = value
    return env


def _check_file(path: str) -> str:
    """`path` if it is a file to run; else a one-line `CliError`.

    Checked before running, so an error raised inside the program itself
    still reaches the user with its traceback.
    """
    target = Path(path)
    if target.is_file() or (target / "__main__.py").is_file():
        return path
    what = "a directory without __main__.py" if target.is_dir() else "not found"
    raise CliError(f"cannot run {path!r}: {what} (give a Python file)")


def _check_module(name: str) -> str:
    """`name` if it names an importable module; else a one-line `CliError`."""
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a missing parent package, or "x."
        found = None
    if found is None:
        raise CliError(
            f"no module named {name!r} in this environment ({sys.executable}); "
            "check the name, or install the package that provides it"
        )
    return name


def _run_program(command: list[str]) -> int:
    """Run a Python program in this process; its exit status."""
    head = command[0]
    if Path(head).name.startswith("python") and len(command) >= 2:
        if command[1] == "-m" and len(command) >= 3:
            module = _check_module(command[2])
            return _guarded(
                command[2:],
                lambda: runpy.run_module(module, run_name="__main__", alter_sys=True),
            )
        path = _check_file(command[1])
        return _guarded(command[1:], lambda: runpy.run_path(path, run_name="__main__"))
    if head.endswith(".py"):
        path = _check_file(head)
        return _guarded(command, lambda: runpy.run_path(path, run_name="__main__"))
    scripts = importlib.metadata.entry_points(group="console_scripts", name=head)
    for script in scripts:
        entry = script.load()
        return _guarded(command, entry)
    raise CliError(
        f"{head!r} is not a Python program dev can run in its own process: give a "
        "console script (e.g. echo-agent), `python -m module` or a .py file, or "
        "use --app module:factory"
    )


def _guarded(argv: list[str], run: Callable[[], object]) -> int:
    saved = sys.argv
    sys.argv = list(argv)
    try:
        result = run()
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved
    return result if isinstance(result, int) else 0


@click.command(
    "dev",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    epilog="\b\nExamples:\n"
    "  turnkeep dev -- echo-agent\n"
    "  turnkeep dev --store jsonl:./dev-sessions -- python -m my_agent\n"
    "  turnkeep dev --app my_agent.app:run     # run(host) is awaited",
)
@click.option(
    "--app", metavar="MODULE:FACTORY", help="Call FACTORY(host) with a started host."
)
@click.option(
    "--debounce",
    type=click.IntRange(10),
    default=300,
    show_default=True,
    help="Milliseconds to wait for a burst of saves to settle.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@common_options
def dev(app: str | None, debounce: int, command: tuple[str, ...]) -> None:
    """Run an agent and hot-reload plugin modules when their files change.

    Live sessions keep going across each reload; nothing is lost or written
    twice. For plugin authors iterating on a backend or a hook.
    """
    if (app is None) == (not command):
        raise click.UsageError("give either --app module:factory or -- COMMAND ...")
    reloader = _Reloader(debounce_ms=debounce)
    spec = options().store
    if app is not None:
        try:
            factory = _load_factory(app)
        except CliError as exc:
            click.echo(f"turnkeep: {exc}", err=True)
            raise click.exceptions.Exit(exc.code) from None

        async def body() -> int:
            with _tracking(reloader):
                async with Host(config_for(spec)) as host:
                    result = factory(host)
                    if inspect.isawaitable(result):
                        await result
            return 0

        execute(body)
    env = _store_env(spec)
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        with _tracking(reloader):
            code = _run_program(list(command))
    except CliError as exc:
        click.echo(f"turnkeep: {exc}", err=True)
        code = exc.code
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    raise click.exceptions.Exit(code)


def register(group: click.Group) -> None:
    """Add this module's commands to the `turnkeep` group."""
    group.add_command(dev)
