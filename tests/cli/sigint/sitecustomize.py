"""Pause the process while a module is imported (`TK_TEST_PAUSE_AT=import:NAME`).

Only on `PYTHONPATH` of the subprocesses `tests/cli/test_interrupt.py`
starts; see `tkpause`.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from tkpause import PAUSE_AT, pause


class _PauseOnImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname == self.name:
            sys.meta_path.remove(self)
            pause(f"import:{fullname}")
        return None  # the usual finders import it


_where = os.environ.get(PAUSE_AT, "")
if _where.startswith("import:"):
    sys.meta_path.insert(0, _PauseOnImport(_where.removeprefix("import:")))
