"""Issue 12 point 10, speed without misses: the pre-filter's fast paths.

The pre-filter looks at the places of each needed character one by one (up
to `CAP`, then one search of the whole text), finds key words only in the
few characters before each `:`/`=`, and finds a lowercase trigger as
written or around its letters' other cases. Whatever the text around it, a
secret inserted anywhere in it is redacted exactly as the rules alone
redact it (`REFERENCE`: the same rules without any pre-filter).
"""

from __future__ import annotations

import itertools

import attrs
from hypothesis import HealthCheck, given, settings, strategies as st

from turnkeep.redaction import SecretRedactor
from turnkeep.secretprobe import CAP
from turnkeep.secretscan import DEFAULT_RULES, Rule, SecretScanner

PREFILTERED = SecretScanner(DEFAULT_RULES)
REFERENCE = SecretScanner(
    tuple(attrs.evolve(r, triggers=(), needs="", cased=False) for r in DEFAULT_RULES)
)

SECRETS = (
    "AKIAIOSFODNN7EXAMPLE",
    "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "sk-proj-Abc123Def456Ghi789Jkl012Mno345",
    "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB",
    "github_pat_11ABCDEFG0123456789_abcdefghijkl",
    "xoxb-123456789012-abcdefghij",
    "xoxb-----BEGINNING1234",  # a Slack token that starts like a PEM header
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhb",
    "postgresql://admin:hunter2secret@db.example.com/prod",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7abc\n"
    "-----END RSA PRIVATE KEY-----",
    "Bearer abcdef0123456789ABC",
    "BEARER abcdef0123456789ABC",
    "bEaReR abcdef0123456789ABC",
    "password = hunter22x",
    'PASSWORD"\t: "hunter22x',
    "pa\u017f\u017fword: hunter22x",
    "to\u212aen=hunter22x",
    "Secret: hunter22x",
    "api_key=hunter22x",
    "ACCESS_KEY: hunter22x",
    "ap\u0130key: hunter22x",
)
WORDS = (
    "the", "A", "Bob", "RARE", "EAR", "bear", "bearer", "earer", "Note:",
    "x=1", "a:b", "well-known", "k-", "_", "J", "eyJ", "AKI", "token", "Token",
    "SECRET", "pass", "key", "://", "@", "plän", "目標", "😀", "-----", "\n",
    "\u017f", "\u212a", "\u0130", "\u0131", "ERR", "BEAR", "Re:", "k=v:w",
)  # fmt: skip
"""Prose, upper case, near-triggers and every needed character."""

prose = st.lists(st.sampled_from(WORDS), max_size=60).map(" ".join)
crowded = st.tuples(
    st.sampled_from((":", "=", "-", "A", "E", "R", "_", "J", "\u0130")),
    st.integers(0, 3 * CAP),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=prose,
    secret=st.sampled_from(SECRETS),
    where=st.floats(0, 1),
    crowd=crowded,
)
def test_a_secret_inserted_anywhere_in_random_prose_is_redacted(
    text: str, secret: str, where: float, crowd: tuple[str, int]
) -> None:
    # Up to three times `CAP` copies of one needed (or upper-case)
    # character: the places looked at one by one, and the whole-text
    # search past them.
    char, count = crowd
    text = char * count + text
    cut = int(len(text) * where)
    inserted = f"{text[:cut]} {secret} {text[cut:]}"
    expected = REFERENCE.scan(inserted)
    assert PREFILTERED.scan(inserted) == expected
    assert expected != inserted
    assert PREFILTERED.scan(text) == REFERENCE.scan(text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=prose, secret=st.sampled_from(SECRETS), cuts=st.lists(st.floats(0, 1)))
def test_a_secret_in_a_streamed_reply_cut_anywhere_matches_the_rules(
    text: str, secret: str, cuts: list[float]
) -> None:
    whole = f"{text} {secret} {text}"
    places = sorted({int(len(whole) * c) for c in cuts} | {0, len(whole)})
    pieces = [whole[a:b] for a, b in itertools.pairwise(places)]
    got: list[str] = []
    want: list[str] = []
    context = reference = ""
    for piece in pieces:
        cleaned, context = PREFILTERED.scan_continued(context, piece)
        expected, reference = REFERENCE.scan_continued(reference, piece)
        got.append(cleaned)
        want.append(expected)
    assert got == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    strings=st.lists(st.one_of(prose, st.sampled_from(SECRETS)), min_size=1, max_size=6)
)
def test_tool_arguments_are_redacted_as_each_string_alone(strings: list[str]) -> None:
    from turnkeep.events import ToolCall, ToolCallData

    arguments = {f"k{i}": [s, {"n": s}] for i, s in enumerate(strings)}
    event = ToolCall(
        seq=0,
        time=0,
        data=ToolCallData(call_id="c", name="run", arguments=arguments, replay="safe"),
    )
    result = SecretRedactor().redact_event(object(), event)  # pyright: ignore[reportArgumentType]
    stored = event.data.arguments if result is None else result.data.arguments
    for i, s in enumerate(strings):
        assert stored[f"k{i}"] == [REFERENCE.scan(s), {"n": REFERENCE.scan(s)}]


def test_a_slack_token_starting_like_a_private_key_header_is_redacted() -> None:
    # Two triggers hold the same `-` (Slack's `xoxb-` and `-----BEGIN`);
    # the pre-filter once kept only the first it tried.
    text = "use xoxb-----BEGINNING1234 now"
    assert (
        PREFILTERED.scan(text) == REFERENCE.scan(text) == "use [REDACTED:api-token] now"
    )


def test_key_words_in_capitals_beyond_the_cap_are_found() -> None:
    # More upper-case letters of `bearer` than `CAP`: one search of a
    # lowered copy instead of a look around each.
    text = "EAR " * (CAP + 2) + "BEARER abcdef0123456789ABC"
    assert PREFILTERED.scan(text) == "EAR " * (CAP + 2) + "BEARER [REDACTED:bearer]"


def test_a_lowercase_trigger_written_with_a_look_alike_letter_is_found() -> None:
    # `re` matches the Kelvin sign to `k` and the dotted capital I to `i`
    # when ignoring case: the pre-filter looks around those too.
    kit = Rule("kit", r"(?i)\bkit[a-z0-9]{8,}", triggers=("kit",))
    scanner = SecretScanner((kit,))
    reference = SecretScanner((attrs.evolve(kit, triggers=()),))
    for word in ("kit", "KIT", "\u212ait", "k\u0130t", "K\u0131T"):
        text = f"pl\u00e4n {word}abcdef012345 done"
        assert (
            scanner.scan(text)
            == reference.scan(text)
            == "pl\u00e4n [REDACTED:kit] done"
        )
