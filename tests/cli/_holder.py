"""Hold a session's writer role in a separate process until stdin closes.

Run as `python _holder.py BACKEND OPTIONS_JSON SESSION_ID [probe]`; prints
`held` once it owns the session, releases it when its standard input ends.
With `probe`, it first stores a summary and prints how that went (`stored`,
or the error's class name and message), as a holder's next write would.
"""

from __future__ import annotations

import asyncio
import sys

import msgspec

from turnkeep import Config, Host
from turnkeep.errors import TurnkeepError
from turnkeep.meta import SessionSummary


async def main(name: str, options: str, session_id: str, probe: str = "") -> None:
    config = Config(
        persistence=name, plugins=(name,), backends={name: msgspec.json.decode(options)}
    )
    async with Host(config) as host:
        backend = host.require_persistence()
        await backend.claim(session_id)
        print("held", flush=True)
        await asyncio.to_thread(sys.stdin.read)
        if probe:
            try:
                await backend.update(session_id, SessionSummary(title="held on"))
            except TurnkeepError as exc:
                print(f"{type(exc).__name__}: {exc}", flush=True)
            else:
                print("stored", flush=True)
        await backend.release(session_id)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
