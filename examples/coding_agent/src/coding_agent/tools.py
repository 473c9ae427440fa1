"""The coding agent's tools, confined to one `Workspace`.

Safe (may be re-run after a crash): `read_file`, `list_dir`, `search`.
Unsafe (never re-run; reported as interrupted after a crash): `write_file`,
`apply_patch`, `run_command`. An interrupted `run_command` whose command may
write blocks the session until it is resolved (`RunCommand.on_unknown`).
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
from collections.abc import Mapping
from typing import Any, Final

import attrs

from coding_agent import reaper
from coding_agent.readonly import command_writes
from coding_agent.workspace import Workspace, special_kind
from turnkeep.agent.tools import Tool, ToolContext, int_argument, str_argument
from turnkeep.effectdata import UnknownPolicy
from turnkeep.errors import ToolError
from turnkeep.events import ReplayPolicy

__all__ = [
    "DEFAULT_INHERITED",
    "ApplyPatch",
    "ListDir",
    "ReadFile",
    "RunCommand",
    "Search",
    "WriteFile",
    "workspace_tools",
]

MAX_OUTPUT: Final = 16 * 1024
"""The most command output handed back to the model."""
MAX_MATCHES: Final = 50
_SKIP_DIRS: Final = frozenset({".git", "__pycache__", ".venv", "node_modules"})
_OPTION_LETTERS: Final = re.compile(r"[A-Za-z0-9]+")


def _schema(**properties: dict[str, Any]) -> dict[str, Any]:
    required = [k for k, v in properties.items() if not v.pop("optional", False)]
    return {"type": "object", "properties": properties, "required": required}


@attrs.frozen
class ReadFile:
    """Read a text file of the workspace."""

    workspace: Workspace
    name: str = attrs.field(default="read_file", init=False)
    description: str = attrs.field(
        default="Read a text file (path relative to the workspace).", init=False
    )
    parameters: dict[str, Any] = attrs.field(
        factory=lambda: _schema(path={"type": "string"}), init=False
    )
    replay: ReplayPolicy = attrs.field(default="safe", init=False)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Return the file's text."""
        path = str_argument(arguments, "path")
        return await asyncio.to_thread(self.workspace.read_text, path)


@attrs.frozen
class ListDir:
    """List a directory of the workspace."""

    workspace: Workspace
    name: str = attrs.field(default="list_dir", init=False)
    description: str = attrs.field(
        default=(
            "List a directory (default: the workspace root). Directories end in "
            "'/', symlinks in '@'."
        ),
        init=False,
    )
    parameters: dict[str, Any] = attrs.field(
        factory=lambda: _schema(path={"type": "string", "optional": True}), init=False
    )
    replay: ReplayPolicy = attrs.field(default="safe", init=False)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Return one entry per line."""
        path = self.workspace.resolve(str_argument(arguments, "path", "."))
        return await asyncio.to_thread(self._list, path)

    def _list(self, path: os.PathLike[str]) -> str:
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except FileNotFoundError:
            raise ToolError("no such directory") from None
        except NotADirectoryError:
            raise ToolError("not a directory") from None
        names = [
            e.name + ("@" if e.is_symlink() else "/" if e.is_dir() else "")
            for e in entries
        ]
        return "\n".join(names) if names else "(empty)"


@attrs.frozen
class Search:
    """Find lines containing a text in the workspace's files."""

    workspace: Workspace
    name: str = attrs.field(default="search", init=False)
    description: str = attrs.field(
        default=(
            "Find lines containing `text` (plain text, case-sensitive) in files "
            "under `path` (default: everywhere). Prints path:line: text."
        ),
        init=False,
    )
    parameters: dict[str, Any] = attrs.field(
        factory=lambda: _schema(
            text={"type": "string"}, path={"type": "string", "optional": True}
        ),
        init=False,
    )
    replay: ReplayPolicy = attrs.field(default="safe", init=False)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Return up to `MAX_MATCHES` matching lines."""
        text = str_argument(arguments, "text")
        if not text:
            raise ToolError("`text` must not be empty")
        start = self.workspace.resolve(str_argument(arguments, "path", "."))
        return await asyncio.to_thread(self._search, text, str(start))

    def _search(self, text: str, start: str) -> str:
        pattern = re.compile(re.escape(text))
        matches: list[str] = []
        skipped: list[str] = []
        # Symlinks are never followed, so the walk cannot leave the workspace.
        for directory, dirs, files in os.walk(start, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            for filename in sorted(files):
                full = os.path.join(directory, filename)
                relative = os.path.relpath(full, self.workspace.root)
                try:
                    kind = special_kind(os.lstat(full).st_mode)
                except OSError:
                    continue  # gone meanwhile
                if kind == "a symlink":
                    continue
                if kind is not None:  # a FIFO would block the read (R23)
                    skipped.append(f"{relative} ({kind})")
                    continue
                try:
                    lines = self.workspace.read_text(relative).splitlines()
                except ToolError:
                    continue
                for number, line in enumerate(lines, start=1):
                    if pattern.search(line):
                        matches.append(f"{relative}:{number}: {line.strip()}")
                        if len(matches) >= MAX_MATCHES:
                            return "\n".join([*matches, "[... more matches cut]"])
        found = matches or ["no matches"]
        if skipped:
            found.append(f"[skipped, not regular files: {', '.join(skipped)}]")
        return "\n".join(found)


@attrs.frozen
class WriteFile:
    """Write a file of the workspace (replacing it)."""

    workspace: Workspace
    name: str = attrs.field(default="write_file", init=False)
    description: str = attrs.field(
        default="Write `content` to the file at `path` (replaces it).", init=False
    )
    parameters: dict[str, Any] = attrs.field(
        factory=lambda: _schema(path={"type": "string"}, content={"type": "string"}),
        init=False,
    )
    replay: ReplayPolicy = attrs.field(default="unsafe", init=False)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Write the file and say how much was written."""
        path = str_argument(arguments, "path")
        content = str_argument(arguments, "content")
        size = await asyncio.to_thread(self.workspace.write_text, path, content)
        return f"wrote {size} bytes to {path}"


@attrs.frozen
class ApplyPatch:
    """Replace exact text in a file of the workspace."""

    workspace: Workspace
    name: str = attrs.field(default="apply_patch", init=False)
    description: str = attrs.field(
        default=(
            "Edit the file at `path`: replace `old` (which must occur exactly once) "
            "with `new`."
        ),
        init=False,
    )
    parameters: dict[str, Any] = attrs.field(
        factory=lambda: _schema(
            path={"type": "string"}, old={"type": "string"}, new={"type": "string"}
        ),
        init=False,
    )
    replay: ReplayPolicy = attrs.field(default="unsafe", init=False)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Apply the edit, or refuse it if `old` is missing or ambiguous."""
        path = str_argument(arguments, "path")
        old = str_argument(arguments, "old")
        new = str_argument(arguments, "new")
        if not old:
            raise ToolError("`old` must not be empty")
        return await asyncio.to_thread(self._patch, path, old, new)

    def _patch(self, path: str, old: str, new: str) -> str:
        text = self.workspace.read_text(path, limit=8 * 1024 * 1024)
        count = text.count(old)
        if count != 1:
            raise ToolError(
                f"`old` occurs {count} times in {path}; it must occur exactly once"
            )
        self.workspace.write_text(path, text.replace(old, new, 1))
        return f"patched {path}"


DEFAULT_INHERITED: Final = frozenset(
    {"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "TERM"}
)
"""What `run_command` passes on from this process's environment by default."""


@attrs.frozen
class RunCommand:
    """Run a command in the workspace directory, with a timeout.

    The command is split like a shell would (no shell runs it) and started in
    its own process group. On timeout or cancellation it is killed with
    everything it started: on Linux also the processes that left its group
    (`setsid`, a daemon's double fork), through a subreaper supervisor that
    kills and reaps them, and which also ends what a command that exits
    leaves running (`coding_agent.reaper`); elsewhere its process group. It
    runs in the workspace, with `HOME` set to it, and its environment holds
    only the variables named by `inherit` (by default `PATH`, the locale,
    `TZ` and `TERM`: never this process's API keys, tokens or proxy
    credentials), plus the call id as `TURNKEEP_CALL_ID` for commands that
    want an idempotency key.

    Its arguments are checked on a best-effort basis: a path outside the
    workspace that an argument names (absolute, through `..` or through a
    symlink inside the workspace, resolved; whole, after an `=`, glued to a
    short option or to the last of a cluster of them, or as a `file://` URL)
    is refused when it, or the directory it would be created in, exists, so patterns
    such as `sed -n '/def/,/^$/p'` pass. This is a guard against mistakes,
    not confinement: the program runs as this user and can open whatever
    this user can (a path built at run time, or read from a file).
    """

    workspace: Workspace
    default_timeout: int = 60
    max_timeout: int = 600
    inherit: frozenset[str] = attrs.field(default=DEFAULT_INHERITED, kw_only=True)
    name: str = attrs.field(default="run_command", init=False)
    description: str = attrs.field(
        default=(
            "Run a command (split like a shell, no shell features) in the workspace "
            "directory; returns its exit status and output. `timeout` in seconds."
        ),
        init=False,
    )
    parameters: dict[str, Any] = attrs.field(
        factory=lambda: _schema(
            command={"type": "string"}, timeout={"type": "integer", "optional": True}
        ),
        init=False,
    )
    replay: ReplayPolicy = attrs.field(default="unsafe", init=False)

    def on_unknown(self, arguments: Mapping[str, Any]) -> UnknownPolicy:
        """`block` for a command that may write, `report` for one that only reads.

        Recorded on each call's `tool/call`: an interrupted call of a command
        that may write keeps the session's next turn refused until it is
        resolved (`coding_agent.readonly` says which commands only read).
        """
        command = arguments.get("command")
        if isinstance(command, str) and not command_writes(command):
            return "report"
        return "block"

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Run the command; report its exit status and (cut) output."""
        command = str_argument(arguments, "command")
        timeout = int_argument(arguments, "timeout", self.default_timeout)
        if not 0 < timeout <= self.max_timeout:
            raise ToolError(f"`timeout` must be 1..{self.max_timeout} seconds")
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ToolError(f"cannot split the command: {exc}") from None
        if not argv:
            raise ToolError("the command is empty")
        for argument in argv[1:]:
            self._check_path_argument(argument)
        env = {k: v for k, v in os.environ.items() if k in self.inherit}
        env |= {"HOME": str(self.workspace.root), "TURNKEEP_CALL_ID": context.call_id}
        try:
            process = await reaper.start(argv, cwd=self.workspace.root, env=env)
        except reaper.StartError as exc:
            raise ToolError(f"cannot start {argv[0]!r}: {exc.strerror}") from None
        try:
            output, _ = await asyncio.wait_for(process.communicate(), timeout)
        except TimeoutError:
            await reaper.stop(process)
            raise ToolError(
                f"the command did not finish within {timeout} s and was killed"
            ) from None
        except BaseException:  # cancelled (the turn's cancel, deadline or stall)
            await reaper.stop(process)
            raise
        failed = reaper.start_error(process)
        # It ended, and its supervisor ended the tree, unless the command
        # killed the supervisor: then what it left behind goes now.
        await reaper.stop(process)
        if failed is not None:
            raise ToolError(f"cannot start {argv[0]!r}: {failed.strerror}")
        text = output[:MAX_OUTPUT].decode("utf-8", "replace")
        if len(output) > MAX_OUTPUT:
            text += f"\n[... output cut at {MAX_OUTPUT} bytes]"
        return f"exit status {process.returncode}\n{text}"

    def _check_path_argument(self, argument: str) -> None:
        candidates = [(argument, False), *((a, False) for a in argument.split("=")[1:])]
        if argument.startswith("-") and not argument.startswith("--"):
            # A value may be glued to any letter of a cluster of short
            # options: `-o/path`, `-C..`, and `-uo/path` (`sort -u -o /path`).
            # Which letters take a value is the program's business, so every
            # split is tried; past the first, a split may cut a relative
            # value (`-uosub/x` tries `/x`), so a new file in `/` is let pass.
            letters = _OPTION_LETTERS.match(argument, 1)
            end = letters.end() if letters else 1
            candidates.extend((argument[at:], at > 2) for at in range(2, end + 1))
        root = self.workspace.root
        for candidate, guessed in candidates:
            candidate = candidate.removeprefix("file://")
            if not candidate:
                continue
            # Relative ones too: a symlink inside the workspace may lead out.
            try:
                target = (root / candidate).resolve(strict=False)
                if target == root or root in target.parents:
                    continue
                parent = target.parent
                names_a_path = target.exists() or (
                    parent.is_dir() and not (guessed and parent == parent.parent)
                )
            except (OSError, ValueError):  # unreadable or not a path at all
                names_a_path = os.path.isabs(candidate) or ".." in candidate.split("/")
            if names_a_path:
                raise ToolError(
                    f"argument {argument!r} names a path outside the workspace; "
                    "run_command's arguments stay inside it"
                )


def workspace_tools(workspace: Workspace) -> list[Tool]:
    """The six tools over `workspace`."""
    return [
        ReadFile(workspace),
        ListDir(workspace),
        Search(workspace),
        WriteFile(workspace),
        ApplyPatch(workspace),
        RunCommand(workspace),
    ]
