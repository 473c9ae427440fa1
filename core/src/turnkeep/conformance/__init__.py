"""The backend conformance kit: contract classes every backend must pass.

Implemented here; consumed by backend test suites (turnkeep's own and third
parties'). Nothing here is collected by pytest until a test module subclasses
a contract with a name starting with `Test` and provides one fixture,
`make_backend`: a zero-argument callable building a backend instance over the
test's own fresh storage. A backend's whole test file can be:

    import pytest
    from turnkeep.conformance import PersistenceContract
    from mybackend import MyPersistence

    class TestMyBackend(PersistenceContract):
        supports_multiple_processes = True

        @pytest.fixture
        def make_backend(self, tmp_path):
            return lambda: MyPersistence(tmp_path / "store")

Capabilities are declared as class attributes (see `BackendHarness`); tests
that need an undeclared one are skipped with the reason. Requires the
`conformance` extra (`pip install "turnkeep[conformance]"`): pytest and
pytest-asyncio.
"""

from __future__ import annotations

from ._append import AppendContract
from ._audit import AuditContract
from ._cancel import CancelRequestContract
from ._damage import CrashTailContract, FormatVersionContract
from ._delete import DeleteContract
from ._follow import FollowContract
from ._harness import BackendHarness, MakeBackend
from ._held import HeldContract
from ._ids import HOSTILE_IDS, IdsContract
from ._listfilter import ListFilterContract
from ._listing import ListContract
from ._load import LoadContract
from ._loadafter import LoadAfterContract
from ._metadata import MetadataContract
from ._outcome import UnknownOutcomeContract
from ._ownership import OwnershipContract
from ._packs import PacksContract
from ._sessions import SessionsContract
from ._summaryappend import SummaryAppendContract

__all__ = [
    "HOSTILE_IDS",
    "AppendContract",
    "AuditContract",
    "BackendHarness",
    "CancelRequestContract",
    "CrashTailContract",
    "DeleteContract",
    "FollowContract",
    "FormatVersionContract",
    "HeldContract",
    "IdsContract",
    "ListContract",
    "ListFilterContract",
    "LoadAfterContract",
    "LoadContract",
    "MakeBackend",
    "MetadataContract",
    "OwnershipContract",
    "PacksContract",
    "PersistenceContract",
    "SessionsContract",
    "SummaryAppendContract",
    "UnknownOutcomeContract",
]


class PersistenceContract(
    AppendContract,
    LoadContract,
    ListContract,
    ListFilterContract,
    MetadataContract,
    SummaryAppendContract,
    DeleteContract,
    IdsContract,
    OwnershipContract,
    CrashTailContract,
    FormatVersionContract,
    SessionsContract,
    UnknownOutcomeContract,
    HeldContract,
    LoadAfterContract,
    FollowContract,
    CancelRequestContract,
    AuditContract,
    PacksContract,
):
    """Every contract at once."""
