"""Keep flushing to a few sessions in a separate process until stdin closes.

Run as `python _flusher.py BACKEND OPTIONS_JSON`. Writes sessions `live-0`,
`live-1`, `live-2` round-robin, one flush at a time; flush `n` of a session
holds `1 + n % 4` user messages whose text is `f<n>:<i>/<k>` (message `i` of
`k`), so a reader can tell a whole flush from part of one. Prints `ready`
once every session holds a flush, and stops (closing the sessions) when its
standard input ends.
"""

from __future__ import annotations

import asyncio
import sys
import threading

import msgspec

from turnkeep import Config, Host
from turnkeep.events import UserMessageData

SESSIONS = ("live-0", "live-1", "live-2")


async def main(name: str, options: str) -> None:
    config = Config(
        persistence=name, plugins=(name,), backends={name: msgspec.json.decode(options)}
    )
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    async with Host(config) as host:
        sessions = [host.sessions.create(sid) for sid in SESSIONS]
        flush = 0
        while not done.is_set():
            for session in sessions:
                size = 1 + flush % 4
                for i in range(size):
                    session.append(UserMessageData(text=f"f{flush}:{i}/{size}"))
                await session.flush()
            if flush == 0:
                print("ready", flush=True)
            flush += 1
        for sid in SESSIONS:
            await host.sessions.close(sid)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
