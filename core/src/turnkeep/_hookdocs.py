"""Renders `docs/hooks.md` from the hook specifications (`make docs`).

The spec docstrings are the single source; `tests/test_docs.py` fails when
the committed reference and this rendering disagree.
"""

from __future__ import annotations

import inspect
import sys

from turnkeep import hookspecs

__all__ = ["render"]

_GROUPS = (
    (
        "Session lifecycle",
        (
            "session_created",
            "redact_event",
            "session_event",
            "session_flush",
            "session_committed",
            "session_closed",
        ),
    ),
    ("Effects", ("reconcile_effect", "turn_manifest")),
    (
        "Capabilities",
        (
            "register_persistence",
            "register_event_types",
            "render_transcript",
            "redact_text",
        ),
    ),
    ("Plugin lifecycle", ("plugin_apply", "plugin_dispose")),
)


def render() -> str:
    """Return the Markdown hook reference."""
    lines = [
        "# Hook reference",
        "",
        "<!-- Generated from turnkeep/hookspecs.py by `make docs`; do not edit. -->",
        "",
        inspect.cleandoc(hookspecs.__doc__ or ""),
        "",
        "Implement a hook with `@turnkeep.hookimpl` on a module-level function or",
        "a method of a plugin object, accepting any subset of its arguments.",
        "",
    ]
    for title, names in _GROUPS:
        lines += [f"## {title}", ""]
        for name in names:
            spec = getattr(hookspecs, name)
            opts = getattr(spec, f"{hookspecs.PROJECT_NAME}_spec")
            signature = str(inspect.signature(spec)).replace("'", "")
            lines += [f"### `{name}{signature}`", ""]
            flags = [k for k, v in sorted(opts.items()) if v is True]
            if flags:
                lines += [f"Options: {', '.join(flags)}.", ""]
            lines += [_markdown(inspect.cleandoc(spec.__doc__ or "")), ""]
    return "\n".join(lines).rstrip() + "\n"


_SECTIONS = ("Called", "Calling convention", "Args", "Returns", "Contract")


def _markdown(doc: str) -> str:
    out: list[str] = []
    section = ""
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and stripped[:-1] in _SECTIONS:
            section = stripped[:-1]
            out += ["", f"**{section}.**", ""]
        elif stripped.startswith("Added in:"):
            out += ["", f"*Added in {stripped.removeprefix('Added in:').strip()}*"]
        elif section == "Args" and line.startswith("    ") and ":" in stripped:
            name, _, text = stripped.partition(":")
            out.append(f"- `{name}`: {text.strip()}")
        else:
            out.append(line[4:] if line.startswith("    ") else line)
    return "\n".join(out).strip()


if __name__ == "__main__":
    sys.stdout.write(render())
