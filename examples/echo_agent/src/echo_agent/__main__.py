"""`python -m echo_agent`: the echo agent's command line."""

from __future__ import annotations

from echo_agent.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
