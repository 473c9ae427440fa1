"""`python -m coding_agent`: the coding agent's command line."""

from __future__ import annotations

from coding_agent.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
