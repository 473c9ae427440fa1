"""Hold a session's writer role in a separate process until stdin closes.

Run as `python _holder.py BACKEND OPTIONS_JSON SESSION_ID`; prints `held`
once it owns the session, releases it when its standard input ends.
"""

from __future__ import annotations

import asyncio
import sys

import msgspec

from turnkeep import Config, Host


async def main(name: str, options: str, session_id: str) -> None:
    config = Config(
        persistence=name, plugins=(name,), backends={name: msgspec.json.decode(options)}
    )
    async with Host(config) as host:
        backend = host.require_persistence()
        await backend.claim(session_id)
        print("held", flush=True)
        await asyncio.to_thread(sys.stdin.read)
        await backend.release(session_id)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
