"""A streamed reply held back for redaction (`turnkeep.heldstream`).

Issue 34, item 5: every rule's example secrets, split at every offset, are
released without a byte of the secret, as the whole text's scan redacts
them; no piece waits more than K characters (`SecretScanner.hold`).
"""

from __future__ import annotations

import itertools
import random

import pytest
from tests.core.test_redaction_prefilter import corpus

from turnkeep.heldstream import HeldStream
from turnkeep.secretrules import DEFAULT_HOLD
from turnkeep.secretscan import DEFAULT_RULES, SecretScanner, rules_from

SCANNER = SecretScanner(DEFAULT_RULES)
WIDE = SecretScanner(rules_from([("ticket", r"TCK-\d{6,}")], high_entropy=True))
"""With rules that can match anywhere (no triggers): every piece waits K."""

EXAMPLES: tuple[tuple[str, str], ...] = (
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7abc\n-----END RSA "
     "PRIVATE KEY-----", "MIIEowIBAAKCAQEA7abc"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\n" + "b3BlbnNzaC1rZXktdjEAAAA\n" * 12
     + "-----END OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAA"),
    ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
     "dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk", "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    ("sk-proj-Abc123Def456Ghi789Jkl012Mno345", "Abc123Def456Ghi789Jkl"),
    ("rk-live-Abc123Def456Ghi789Jkl", "Abc123Def456Ghi789Jkl"),
    ("ghp_1234567890abcdefghijklmnopqrstuvwxyzAB", "1234567890abcdefghij"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijkl", "11ABCDEFG0123456789"),
    ("xoxb-123456789012-abcdefghij", "123456789012-abcdefghij"),
    ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "SyA1234567890abcdefghij"),
    ("Authorization: Bearer abcdef0123456789ABCDEF.xyz", "abcdef0123456789ABCDEF"),
    ("postgresql://admin:hunter2secret@db.example.com/prod", "hunter2secret"),
    ("password = 'swordfish42'", "swordfish42"),
    ("client_secret: s3cr3t-value-9", "s3cr3t-value-9"),
    ("TOKEN=abcdef123456", "abcdef123456"),
    ('api_key: "AKxyz987654"', "AKxyz987654"),
)  # fmt: skip
"""(secret as written, a part of it no sink may show), for every default rule."""


def prose(secret: str) -> str:
    return f"Sure, here it is: {secret} and that is all you need to know."


def release(scanner: SecretScanner, pieces: list[str]) -> list[str]:
    """Feed `pieces`; check that none waits K characters; return what came out."""
    held = HeldStream(scanner)
    out: list[str] = []
    waiting: list[str] = []
    for piece in pieces:
        waiting.append(piece)
        released = held.feed(piece)
        out.extend(released)
        del waiting[: len(released)]
        # Every held piece but the first has fewer than K characters after it.
        assert held.held - len(waiting[0] if waiting else "") < scanner.hold
        assert held.held == sum(map(len, waiting))
    out.extend(held.end())
    assert len(out) == len(pieces)  # one redacted text per piece, in order
    return out


def test_every_default_rule_has_an_example() -> None:
    for index, rule in enumerate(DEFAULT_RULES):
        alone = SecretScanner((rule,))
        assert any(alone.scan(s) != s for s, _ in EXAMPLES), (index, rule.name)
    for secret, leak in EXAMPLES:
        assert leak in secret
        assert leak not in SCANNER.scan(prose(secret))


IDS = [secret[:12] for secret, _ in EXAMPLES]


@pytest.mark.parametrize(("secret", "leak"), EXAMPLES, ids=IDS)
def test_a_secret_split_at_every_offset_is_released_redacted(
    secret: str, leak: str
) -> None:
    text = prose(secret)
    expected = SCANNER.scan(text)
    for at in range(1, len(text)):
        out = release(SCANNER, [text[:at], text[at:]])
        assert "".join(out) == expected, at
    # One character per piece: a boundary at every offset at once.
    out = release(SCANNER, list(text))
    assert "".join(out) == expected
    assert not any(leak[:4] in piece for piece in out)


@pytest.mark.parametrize(("size", "count"), [(1, 40), (3, 100), (7, 160)])
def test_pieces_join_to_the_whole_texts_scan(size: int, count: int) -> None:
    rnd = random.Random(size)
    for text in corpus(count, seed=34 + size):
        text *= rnd.randint(1, 2)
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        for scanner in (SCANNER, WIDE):
            assert "".join(release(scanner, pieces)) == scanner.scan(text), text


def test_random_splits_of_a_mixed_corpus() -> None:
    rnd = random.Random(7)
    for text in corpus(300, seed=7):
        cuts = sorted(rnd.sample(range(1, len(text)), min(len(text) - 1, 12)))
        bounds = [0, *cuts, len(text)]
        pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
        for scanner in (SCANNER, WIDE):
            assert "".join(release(scanner, pieces)) == scanner.scan(text), text


def test_text_without_triggers_waits_little() -> None:
    text = "plain words streamed one after another " * 20
    held = HeldStream(SCANNER)
    most = 0
    for piece in (text[i : i + 5] for i in range(0, len(text), 5)):
        held.feed(piece)
        most = max(most, held.held)
    assert most < SCANNER.hold // 2  # the quiet tail and one batch, not K
    assert SCANNER.quiet < most


def test_a_key_longer_than_its_rules_hold_is_suppressed_to_its_end() -> None:
    body = "".join(f"Q{i:04d}abcdefghij" for i in range(60))
    text = f"key: -----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY----- ok"
    out = release(SCANNER, [text[i : i + 7] for i in range(0, len(text), 7)])
    assert "".join(out) == SCANNER.scan(text)
    assert "Q0001" not in "".join(out)
    assert "".join(out).endswith(" ok")


def test_the_rule_sets_hold() -> None:
    assert SCANNER.hold == max(rule.hold or 0 for rule in DEFAULT_RULES) == 128
    assert 0 < SCANNER.quiet < SCANNER.hold
    # A rule that does not say how long it takes gets the default.
    entropy = rules_from([], high_entropy=True)[-1]
    assert entropy.hold is None
    assert SecretScanner((DEFAULT_RULES[2], entropy)).hold == DEFAULT_HOLD


def test_nothing_fed_releases_nothing() -> None:
    assert HeldStream(SCANNER).end() == []
