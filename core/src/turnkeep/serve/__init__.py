"""`turnkeep serve`: stored sessions seen from outside the writing process.

An ASGI application (Starlette, served by uvicorn, SSE by sse-starlette:
the extra `turnkeep[serve]`) over one started `Host` and its backend. It
only reads sessions, except for `POST /recover` (the recovery sweep), and
shows committed (durable) events only. Modules, one idea each:

- `problems`: errors as JSON with a stable `code`, never a traceback;
- `guard`: who may ask what (the bearer token, the sign-in cookie, the
  anti-forgery header), with `tokens` (what a token must be), `clients`
  (the client's address, through trusted proxies) and `budgets` (requests,
  streams and failed authentications per client);
- `query`: parsing and bounding query parameters and bodies;
- `listing`: one page of sessions, filtered (the one place that knows how);
- `follow`: waiting for a session's next commit, and the shared tail that
  fans committed events out to SSE clients through bounded queues;
- `views`: what the JSON endpoints return;
- `api`: the JSON and SSE endpoints;
- `page` and `transcript`: the web page (server-rendered HTML, one small
  script and stylesheet from `static/`);
- `app`: assembling the application; `run`: running it under uvicorn.

The layers: this package imports the seam and the agent loop, and neither
of them imports it; the `turnkeep serve` command (`turnkeep.cli`) imports it.
"""

from __future__ import annotations

from turnkeep.serve.app import create_app
from turnkeep.serve.run import check_bind, serve

__all__ = ["check_bind", "create_app", "serve"]
