"""`python -m sdk_agent`: see `sdk_agent.cli`."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
