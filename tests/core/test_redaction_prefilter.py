"""Issue 12 point 10, speed: the pre-filter that lets most text skip the regex
pass (triggers, rare-character gates, lowercase triggers searched without a
lowered copy, tool arguments checked as JSON) never drops a secret the rules
alone would find."""

from __future__ import annotations

import asyncio
import random

import attrs
import pytest

from turnkeep import Config, Host
from turnkeep.errors import ConfigurationError
from turnkeep.events import AssistantChunkData, ToolCall, ToolCallData
from turnkeep.redaction import SecretRedactor
from turnkeep.secretscan import DEFAULT_RULES, Rule, SecretScanner

PREFILTERED = SecretScanner(DEFAULT_RULES)
REFERENCE = SecretScanner(
    tuple(attrs.evolve(r, triggers=(), needs="", cased=False) for r in DEFAULT_RULES)
)
"""The same rules without any pre-filter: every text takes the regex pass."""

KEY_WORDS = (
    "password", "PASSWORD", "PassWord", "passwd", "secret", "SECRET", "Secret",
    "token", "TOKEN", "ToKeN", "api_key", "API_KEY", "apikey", "ApiKey",
    "access_key", "ACCESS_KEY",
    # Letters `re` matches to ASCII ones when ignoring case (long s,
    # Kelvin sign, dotted and dotless i): the rules catch these too.
    "pa\u017f\u017fword", "to\u212aen", "ap\u0130key", "AP\u0131KEY",
)  # fmt: skip
GAPS = (": ", "=", '="', "' : '", "\"\t \n=\u3000 '")
"""Between word and value: up to a quote and three spaces each side."""
SECRETS = (
    "AKIAIOSFODNN7EXAMPLE",
    "ASIAQWERTYUIOPASDFGH",
    "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "sk-proj-Abc123Def456Ghi789Jkl012Mno345",
    "rk-live-Abc123Def456Ghi789Jkl",
    "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB",
    "github_pat_11ABCDEFG0123456789_abcdefghijkl",
    "xoxb-123456789012-abcdefghij",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhb",
    "postgresql://admin:hunter2secret@db.example.com/prod",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7abc\n"
    "-----END RSA PRIVATE KEY-----",
    *(f"{w} abcdef0123456789ABC" for w in ("Bearer", "BEARER", "bEaReR", "bearer")),
    *(f"{w}{sep}hunter22x" for w in KEY_WORDS for sep in GAPS),
)
FILLER = (
    "plän", "目標", "the", "A", "key", "well-known", "user@example.com", "a:b",
    "x=1", "tok", "bear", "BE", "e", "J", "yJ", "eyJ", "_", "k-", "xo", "://",
    "-----", "AKI", "gh", "Token", "SECRET", "pass", "Hello", "😀", "line\n",
)  # fmt: skip
AROUND = (("", ""), ("plän ", " 目標"), ("Hi ", " 😀"), ("x\n", "\t"))
SEPARATORS = (" ", " ", "\n", "", '"', "(", ", ", "\t")


def corpus(count: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    texts: list[str] = []
    for _ in range(count):
        parts = [
            rnd.choice(SECRETS) if rnd.random() < 0.3 else rnd.choice(FILLER)
            for _ in range(rnd.randint(1, 9))
        ]
        texts.append("".join(p + rnd.choice(SEPARATORS) for p in parts))
    return texts


def test_the_prefilter_finds_what_the_rules_alone_find() -> None:
    redacted = 0
    for text in corpus(3000, seed=12):
        expected = REFERENCE.scan(text)
        assert PREFILTERED.scan(text) == expected, text
        redacted += expected != text
    assert redacted > 1000  # the corpus holds plenty of secrets


@pytest.mark.parametrize("crowd", ["x=1 ", "a: b\n", "k=v:w "])
def test_text_crowded_with_colons_or_equals_finds_what_the_rules_find(
    crowd: str,
) -> None:
    # Past a few `:`/`=`, the assignment triggers are searched in the whole
    # text instead of just before each: the same matches either way.
    for count in (1, 11, 12, 13, 40):
        for text in corpus(300, seed=count):
            crowded = crowd * count + text + crowd * count
            assert PREFILTERED.scan(crowded) == REFERENCE.scan(crowded), crowded


def test_look_alike_letters_in_a_key_word_are_redacted() -> None:
    for word in ("pa\u017f\u017fword", "to\u212aen", "ap\u0130key", "AP\u0131KEY"):
        for text in (f"{word}: hunter22x", "x=1 " * 30 + f"{word}=hunter22x"):
            assert "hunter22x" not in PREFILTERED.scan(text), text


def test_every_secret_shape_alone_in_every_surrounding_is_found() -> None:
    for secret in SECRETS:
        for before, after in AROUND:
            text = f"{before}{secret}{after}"
            cleaned = PREFILTERED.scan(text)
            assert cleaned == REFERENCE.scan(text)
            assert "[REDACTED:" in cleaned, text


def test_text_with_partial_triggers_only_is_returned_as_is() -> None:
    text = " ".join(FILLER) * 3
    assert REFERENCE.scan(text) == text
    assert PREFILTERED.scan(text) is text


@pytest.mark.parametrize("secret", SECRETS)
def test_a_secret_split_anywhere_across_streamed_pieces_matches_the_rules(
    secret: str,
) -> None:
    text = f"plän: {secret} done"
    start = text.index(secret)
    for cut in range(1, len(text)):
        got: list[str] = []
        want: list[str] = []
        context = reference_context = ""
        for piece in (text[:cut], text[cut:]):
            cleaned, context = PREFILTERED.scan_continued(context, piece)
            expected, reference_context = REFERENCE.scan_continued(
                reference_context, piece
            )
            got.append(cleaned)
            want.append(expected)
        assert got == want, cut
        if start < cut <= start + 6:  # the cut falls in the secret's trigger
            assert "[REDACTED:" in got[1], cut


def test_streamed_pieces_through_the_redactor_hide_a_split_trigger() -> None:
    pieces = ["call it with Authorization: Bea", "rer abcdef0123456789ABC please"]

    async def run() -> list[str]:
        async with Host(Config(persistence="memory", plugins="none")) as host:
            session = host.sessions.create("s")
            return [
                session.append(AssistantChunkData(text=p)).data.text for p in pieces
            ]

    stored = asyncio.run(run())
    assert "abcdef0123456789ABC" not in stored[1]
    assert stored[1].startswith("rer [REDACTED:bearer]")


def call(arguments: dict[str, object]) -> ToolCall:
    data = ToolCallData(call_id="c", name="run", arguments=arguments, replay="safe")
    return ToolCall(seq=0, time=0, data=data)


@pytest.mark.parametrize(
    "arguments",
    [
        {"env": ["API_KEY=hunter22x"]},
        {"cmd": ["curl", "-H", "Authorization: BEARER abcdef0123456789"]},
        {'q"uote': 'a\\b"AKIAIOSFODNN7EXAMPLE"\n'},
        {"AKIAIOSFODNN7EXAMPLE": 1},
        {"nested": [[{"dsn": "https://u:pw12345@h/"}]]},
    ],
    ids=["assignment", "bearer", "escaped", "key", "nested"],
)
def test_tool_arguments_checked_as_json_are_still_redacted(
    arguments: dict[str, object],
) -> None:
    redactor = SecretRedactor()
    event = call(arguments)
    session = object()
    result = redactor.redact_event(session, event)  # pyright: ignore[reportArgumentType]
    assert result is not None
    assert "[REDACTED:" in repr(result.data)


def test_clean_tool_arguments_leave_the_event_as_it_is() -> None:
    event = call({"path": "src/a.py", "limit": 3, "flags": ["-k", "x=1"]})
    assert SecretRedactor().redact_event(object(), event) is None  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize(
    "arguments",
    [
        # JSON would escape the gap (quote, tab, newline): the key word ends
        # further from its `=` there than in the text itself.
        {"env": 'pl\u00e4n password"\t \n= hunter22x'},
        {"env": ['token"\t\n\r: hunter22x']},
        # Strings next to each other: a key word in one and a `:` in the
        # next is no secret, a secret in either is found.
        {"token": ": hunter22x", "b": "AKIAIOSFODNN7EXAMPLE"},
    ],
    ids=["escaped-gap", "escaped-gap-in-list", "neighbours"],
)
def test_tool_arguments_are_checked_as_their_strings_not_their_json(
    arguments: dict[str, object],
) -> None:
    result = SecretRedactor().redact_event(object(), call(arguments))  # pyright: ignore[reportArgumentType]
    assert result is not None
    for key, value in arguments.items():
        for text in [key, *(value if isinstance(value, list) else [value])]:
            assert isinstance(text, str)
            stored = repr(result.data.arguments)
            assert PREFILTERED.scan(text) == REFERENCE.scan(text)
            if REFERENCE.scan(text) != text:
                assert repr(text)[1:-1] not in stored, text


@pytest.mark.parametrize(
    "rule",
    [
        Rule("gate", "x+", needs="x"),
        Rule("upper", "(?i)abc", triggers=("ABC",)),
        Rule("empty", "abc", triggers=("",)),
    ],
    ids=["needs-without-triggers", "uppercase-trigger", "empty-trigger"],
)
def test_an_unsound_prefilter_is_a_configuration_error(rule: Rule) -> None:
    with pytest.raises(ConfigurationError):
        SecretScanner((rule,))


def test_a_rule_with_triggers_but_no_lead_is_searched_in_the_whole_text() -> None:
    # Its match may start anywhere before the trigger ("-" here), so the
    # scanner cannot try only the places next to it.
    ticket = Rule("ticket", r"\b[A-Z]{3,}-[0-9]{6}\b", triggers=("-",), cased=True)
    scanner = SecretScanner((*DEFAULT_RULES, ticket))
    text = "see OPSTEAM-123456 and token: hunter22x"
    assert scanner.scan(text) == (
        "see [REDACTED:ticket] and token: [REDACTED:secret-assignment]"
    )
