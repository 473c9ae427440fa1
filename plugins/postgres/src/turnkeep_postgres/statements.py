"""The SQL statements of the backend's sessions and events, composed once per schema.

(Migrations, cancel requests and audit records compose their own, in
`schema`, `cancel` and `audit`, the same way.)

Statements are built with `psycopg.sql` (the schema name is an `Identifier`,
never text spliced into SQL), rendered to bytes once at open, and executed
with bind parameters only. Rendering once keeps the hot path free of
composition work, and identical bytes let psycopg prepare each statement on
a connection after a few uses.

An append moves `next_seq`, `turns`, `size` and `counted_seq` together, and
stores each event's `turn_end` flag; it lands only while `counted_seq =
next_seq`. The numbers are exact as of `counted_seq`: past it (only after a
worker of schema 1 appended) reads add the events from `counted_seq` on,
counting turn ends by the flag and handing back how many rows have none
(`turnkeep_postgres.turnends` classifies those), and the next append here
catches the stored numbers up first (`writes`).

The ownership rules live in the `WHERE` clauses here: a flush lands only if
the row still names this instance as owner at the generation it took and the
stored next seq equals the batch's first seq (compare-and-set, evaluated on
the newest row version under its row lock, so two workers can never both
pass it).
"""

from __future__ import annotations

from typing import Any, Final, LiteralString

import attrs
from psycopg import AsyncConnection, sql

__all__ = ["Queries"]

_ROW: Final = "next_seq, generation, owner, format_version, counted_seq"
_META: Final = (
    "s.id, s.format_version, s.header::text, s.summary::text, s.updated_at,"
    " s.next_seq, {turns_now}, {size_now}, s.counted_seq, {unrecorded_now}"
)
# The log's numbers beside `next_seq`, exact as of `counted_seq`; past it (a
# schema-1 worker appended since) the events from `counted_seq` on are added,
# turn ends by their flag. `unrecorded_now` is how many of those have no flag
# (the caller classifies them). Used with the sessions table aliased `s`.
_TURNS_NOW: Final = (
    "CASE WHEN s.counted_seq = s.next_seq THEN s.turns"
    " ELSE s.turns + {uncounted_turns} END"
)
_SIZE_NOW: Final = (
    "CASE WHEN s.counted_seq = s.next_seq THEN s.size"
    " ELSE s.size + {uncounted_size} END"
)
_UNRECORDED_NOW: Final = (
    "CASE WHEN s.counted_seq = s.next_seq THEN 0 ELSE {uncounted_unrecorded} END"
)
_UNCOUNTED: Final = (
    "(SELECT {what} FROM {events} AS e"
    " WHERE e.session_id = s.id AND e.seq >= s.counted_seq AND e.seq < s.next_seq)"
)
_LEASE: Final = "now() + make_interval(secs => %(lease)s)"
# A claim that is free to take: no owner, ours, or its lease ran out.
_FREE: Final = "owner IS NULL OR owner = %(owner)s OR lease_until < now()"


@attrs.frozen
class Queries:
    """The rendered statements for one schema (bytes, ready to execute)."""

    select_row: bytes
    append: bytes
    append_many: bytes
    catch_up: bytes
    unrecorded_heads: bytes
    unrecorded_page: bytes
    raws_at: bytes
    record_turn_ends: bytes
    create: bytes
    claim: bytes
    release: bytes
    drop_claim: bytes
    release_all: bytes
    drop_all_claims: bytes
    renew: bytes
    update: bytes
    append_summary: bytes
    delete: bytes
    deletion_size: bytes
    has: bytes
    held: bytes
    load_meta: bytes
    load_events: bytes
    tail_row: bytes
    load_range: bytes
    list_first: bytes
    list_after: bytes
    list_window_first: bytes
    list_window_after: bytes
    list_status_first: bytes
    list_status_after: bytes

    @classmethod
    async def render(cls, conn: AsyncConnection[Any], schema: str) -> Queries:
        """Compose every statement for `schema` and render it with `conn`."""
        ident = sql.Identifier(schema)
        events = sql.SQL("{}.events").format(ident)
        uncounted: dict[str, LiteralString] = {
            "uncounted_turns": "count(*) FILTER (WHERE e.turn_end)",
            "uncounted_size": "COALESCE(sum(octet_length(e.raw)), 0)",
            "uncounted_unrecorded": "count(*) FILTER (WHERE e.turn_end IS NULL)",
        }
        numbers: dict[str, sql.Composable] = {
            name: sql.SQL(_UNCOUNTED).format(what=sql.SQL(what), events=events)
            for name, what in uncounted.items()
        }
        now = {
            "turns_now": sql.SQL(_TURNS_NOW).format(**numbers),
            "size_now": sql.SQL(_SIZE_NOW).format(**numbers),
            "unrecorded_now": sql.SQL(_UNRECORDED_NOW).format(**numbers),
        }
        names: dict[str, sql.Composable] = {
            "sessions": sql.SQL("{}.sessions").format(ident),
            "events": events,
            "row": sql.SQL(_ROW),
            "meta": sql.SQL(_META).format(**now),
            "lease": sql.SQL(_LEASE),
            "free": sql.SQL(_FREE),
            **now,
        }
        texts = _texts()
        rendered: dict[str, bytes] = {}
        for field in attrs.fields(cls):
            composed = sql.SQL(texts[field.name]).format(**names)
            rendered[field.name] = composed.as_bytes(conn)
        return cls(**rendered)


def _texts() -> dict[str, LiteralString]:
    # `{name}` placeholders are filled by composition with table names and
    # the fixed fragments above; every value is a bind parameter `%(name)s`.
    return {
        "select_row": "SELECT {row} FROM {sessions} WHERE id = %(id)s",
        # Lands only while the stored numbers are counted up to `next_seq`
        # (else `catch_up` runs first).
        "append": (
            "WITH landed AS ("
            " UPDATE {sessions} AS s SET next_seq = s.next_seq + %(count)s,"
            " turns = s.turns + %(turns)s, size = s.size + %(size)s,"
            " counted_seq = s.next_seq + %(count)s,"
            " updated_at = GREATEST(s.updated_at, %(time)s),"
            " lease_until = {lease}"
            " WHERE s.id = %(id)s AND s.owner = %(owner)s"
            " AND s.generation = %(generation)s"
            " AND s.next_seq = %(first)s AND s.counted_seq = s.next_seq"
            " AND s.format_version <= %(format)s"
            " RETURNING s.id)"
            " INSERT INTO {events} (session_id, seq, raw, turn_end, span)"
            " SELECT landed.id, e.seq, e.raw, e.turn_end, e.span"
            " FROM landed, unnest(%(seqs)s::bigint[], %(raws)b::bytea[],"
            " %(ends)s::boolean[], %(spans)s::integer[])"
            " AS e(seq, raw, turn_end, span)"
        ),
        # Many sessions' flushes in one statement (one round trip for a
        # group): the same compare-and-set per row; `landed` names the
        # sessions whose rows matched, and only their events are inserted.
        "append_many": (
            "WITH input AS (SELECT * FROM unnest(%(ids)s::text[],"
            " %(generations)s::bigint[], %(firsts)s::bigint[], %(counts)s::bigint[],"
            " %(times)s::bigint[], %(turns)s::bigint[], %(sizes)s::bigint[])"
            " AS i(id, generation, first, count, time, turns, size)),"
            " landed AS (UPDATE {sessions} s SET next_seq = s.next_seq + i.count,"
            " turns = s.turns + i.turns, size = s.size + i.size,"
            " counted_seq = s.next_seq + i.count,"
            " updated_at = GREATEST(s.updated_at, i.time), lease_until = {lease}"
            " FROM input i WHERE s.id = i.id AND s.owner = %(owner)s"
            " AND s.generation = i.generation AND s.next_seq = i.first"
            " AND s.counted_seq = s.next_seq"
            " AND s.format_version <= %(format)s RETURNING s.id),"
            " inserted AS (INSERT INTO {events}"
            " (session_id, seq, raw, turn_end, span)"
            " SELECT e.session_id, e.seq, e.raw, e.turn_end, e.span"
            " FROM unnest(%(sids)s::text[], %(seqs)s::bigint[], %(raws)b::bytea[],"
            " %(ends)s::boolean[], %(spans)s::integer[])"
            " AS e(session_id, seq, raw, turn_end, span)"
            " WHERE e.session_id IN (SELECT id FROM landed) RETURNING 1)"
            " SELECT id FROM landed"
        ),
        # Counts the events past `counted_seq` into the stored numbers, once
        # every one of them has its flag; the owner's compare-and-set, as for
        # an append.
        "catch_up": (
            "UPDATE {sessions} AS s SET turns = s.turns + g.turns,"
            " size = s.size + g.size, counted_seq = s.next_seq"
            " FROM (SELECT count(*) FILTER (WHERE e.turn_end) AS turns,"
            " COALESCE(sum(octet_length(e.raw)), 0) AS size,"
            " count(*) FILTER (WHERE e.turn_end IS NULL) AS unrecorded"
            " FROM {events} AS e WHERE e.session_id = %(id)s"
            " AND e.seq >= %(counted)s AND e.seq < %(next)s) AS g"
            " WHERE s.id = %(id)s AND s.owner = %(owner)s"
            " AND s.generation = %(generation)s AND s.counted_seq = %(counted)s"
            " AND s.next_seq = %(next)s AND g.unrecorded = 0"
        ),
        # The first bytes of the unflagged events in some `[lo, hi)` seq spans.
        "unrecorded_heads": (
            "SELECT e.session_id, e.seq, substring(e.raw FROM 1 FOR %(head)s)"
            " FROM unnest(%(ids)s::text[], %(los)s::bigint[], %(his)s::bigint[])"
            " AS g(id, lo, hi) JOIN {events} AS e ON e.session_id = g.id"
            " AND e.seq >= g.lo AND e.seq < g.hi WHERE e.turn_end IS NULL"
        ),
        # The same over the whole table, a page at a time in key order.
        "unrecorded_page": (
            "SELECT session_id, seq, substring(raw FROM 1 FOR %(head)s)"
            " FROM {events} WHERE turn_end IS NULL"
            " AND (session_id, seq) > (%(after_id)s, %(after_seq)s)"
            " ORDER BY session_id, seq LIMIT %(limit)s"
        ),
        "raws_at": (
            "SELECT e.session_id, e.seq, e.raw"
            " FROM unnest(%(ids)s::text[], %(seqs)s::bigint[]) AS k(id, seq)"
            " JOIN {events} AS e ON e.session_id = k.id AND e.seq = k.seq"
        ),
        "record_turn_ends": (
            "UPDATE {events} AS e SET turn_end = k.flag"
            " FROM unnest(%(ids)s::text[], %(seqs)s::bigint[], %(flags)s::boolean[])"
            " AS k(id, seq, flag)"
            " WHERE e.session_id = k.id AND e.seq = k.seq AND e.turn_end IS NULL"
        ),
        "create": (
            "INSERT INTO {sessions} AS s (id, format_version, header, summary,"
            " updated_at, next_seq, generation, owner, owner_info, lease_until)"
            " VALUES (%(id)s, %(format)s, %(header)s::json, %(summary)s::json,"
            " %(updated_at)s, 0, 1, %(owner)s, %(info)s, {lease})"
            " ON CONFLICT (id) DO UPDATE SET format_version = EXCLUDED.format_version,"
            " header = EXCLUDED.header, summary = EXCLUDED.summary,"
            " updated_at = EXCLUDED.updated_at, generation = s.generation + 1,"
            " owner = EXCLUDED.owner, owner_info = EXCLUDED.owner_info,"
            " lease_until = EXCLUDED.lease_until"
            " WHERE s.next_seq = 0 AND (s.owner IS NULL OR s.owner = EXCLUDED.owner"
            " OR s.lease_until < now())"
            " RETURNING generation"
        ),
        "claim": (
            "UPDATE {sessions} SET"
            " generation = CASE WHEN owner = %(owner)s THEN generation"
            " ELSE generation + 1 END,"
            " owner = %(owner)s, owner_info = %(info)s, lease_until = {lease}"
            " WHERE id = %(id)s AND next_seq > 0 AND format_version <= %(format)s"
            " AND (%(steal)s OR {free})"
            " RETURNING generation"
        ),
        "release": (
            "UPDATE {sessions} SET owner = NULL, owner_info = NULL, lease_until = NULL"
            " WHERE id = %(id)s AND owner = %(owner)s AND next_seq > 0"
        ),
        "drop_claim": (
            "DELETE FROM {sessions} WHERE id = %(id)s AND owner = %(owner)s"
            " AND next_seq = 0"
        ),
        "release_all": (
            "UPDATE {sessions} SET owner = NULL, owner_info = NULL, lease_until = NULL"
            " WHERE owner = %(owner)s AND next_seq > 0"
        ),
        "drop_all_claims": (
            "DELETE FROM {sessions} WHERE owner = %(owner)s AND next_seq = 0"
        ),
        "renew": (
            "UPDATE {sessions} SET lease_until = {lease}"
            " WHERE owner = %(owner)s RETURNING id"
        ),
        "update": (
            "UPDATE {sessions} SET summary = %(summary)s::json,"
            " updated_at = GREATEST(updated_at, %(updated_at)s)"
            " WHERE id = %(id)s"
            " AND (next_seq > 0 OR (%(pending)s AND owner = %(owner)s))"
            " AND (NOT %(held)s OR (owner = %(owner)s"
            " AND generation = %(generation)s))"
            " RETURNING 1"
        ),
        # Run right after `append` landed, in its transaction: the row is
        # this owner's (the append's compare-and-set just matched it).
        "append_summary": (
            "UPDATE {sessions} SET summary = %(summary)s::json,"
            " updated_at = GREATEST(updated_at, %(updated_at)s)"
            " WHERE id = %(id)s"
        ),
        "delete": (
            "DELETE FROM {sessions} WHERE id = %(id)s AND next_seq > 0"
            " AND (%(force)s OR {free}) RETURNING 1"
        ),
        "has": "SELECT 1 FROM {sessions} WHERE id = %(id)s AND next_seq > 0",
        # What deleting a session writes to the WAL at most: each heap page of
        # its rows (a full-page image after a checkpoint), by their size.
        "deletion_size": (
            "SELECT COALESCE(sum(pg_column_size(e.*)), 0), count(*)"
            " FROM {events} e WHERE e.session_id = %(id)s"
        ),
        # A live hold is one nobody could take without `steal` (not {free}
        # for anyone else): an owner whose lease has not run out.
        "held": (
            "SELECT id FROM {sessions} WHERE id = ANY(%(ids)s)"
            " AND owner IS NOT NULL AND lease_until >= now()"
        ),
        "load_meta": (
            "SELECT {meta} FROM {sessions} AS s WHERE s.id = %(id)s AND s.next_seq > 0"
        ),
        "load_events": (
            "SELECT seq, CASE WHEN octet_length(raw) <= %(max)s THEN raw END,"
            " octet_length(raw), span FROM {events}"
            " WHERE session_id = %(id)s AND seq < %(count)s ORDER BY seq"
        ),
        "tail_row": (
            "SELECT format_version, next_seq FROM {sessions}"
            " WHERE id = %(id)s AND next_seq > 0"
        ),
        # The row and its events in one statement, so one snapshot: read
        # apart, a session deleted and stored again under the id in between
        # would lend its events to the other's numbers. No event in the
        # window still gives the row (with NULLs) through the outer join.
        "load_range": (
            "SELECT s.format_version, s.next_seq, e.seq,"
            " CASE WHEN octet_length(e.raw) <= %(max)s THEN e.raw END,"
            " octet_length(e.raw), e.span FROM {sessions} AS s"
            " LEFT JOIN {events} AS e ON e.session_id = s.id"
            # From the row holding seq `start`: a packed record may begin
            # before it.
            " AND e.seq >= coalesce((SELECT max(p.seq) FROM {events} AS p"
            " WHERE p.session_id = s.id AND p.seq <= %(start)s), 0)"
            " AND e.seq < least(s.next_seq, %(upto)s)"
            " WHERE s.id = %(id)s AND s.next_seq > 0 ORDER BY e.seq"
            " LIMIT %(limit)s"
        ),
        "list_first": (
            "SELECT {meta} FROM {sessions} AS s WHERE s.next_seq > 0"
            " ORDER BY s.updated_at DESC, s.id LIMIT %(limit)s"
        ),
        # `updated_at <= u` bounds the index range; the second condition
        # only filters the rows that tie on `u`.
        "list_after": (
            "SELECT {meta} FROM {sessions} AS s WHERE s.next_seq > 0"
            " AND s.updated_at <= %(updated_at)s"
            " AND (s.updated_at < %(updated_at)s OR s.id > %(id)s)"
            " ORDER BY s.updated_at DESC, s.id LIMIT %(limit)s"
        ),
        # Filtered pages: a time window on `sessions_by_update`, or one
        # status's range of `sessions_by_status` (migration 4) per status.
        "list_window_first": (
            "SELECT {meta} FROM {sessions} AS s WHERE s.next_seq > 0"
            " AND s.updated_at BETWEEN %(lower)s AND %(upper)s"
            " ORDER BY s.updated_at DESC, s.id LIMIT %(limit)s"
        ),
        "list_window_after": (
            "SELECT {meta} FROM {sessions} AS s WHERE s.next_seq > 0"
            " AND s.updated_at BETWEEN %(lower)s AND %(upper)s"
            " AND s.updated_at <= %(updated_at)s"
            " AND (s.updated_at < %(updated_at)s OR s.id > %(id)s)"
            " ORDER BY s.updated_at DESC, s.id LIMIT %(limit)s"
        ),
        "list_status_first": (
            "SELECT {meta} FROM {sessions} AS s WHERE s.next_seq > 0"
            " AND (s.summary ->> 'status') = %(status)s"
            " AND s.updated_at BETWEEN %(lower)s AND %(upper)s"
            " ORDER BY s.updated_at DESC, s.id LIMIT %(limit)s"
        ),
        "list_status_after": (
            "SELECT {meta} FROM {sessions} AS s WHERE s.next_seq > 0"
            " AND (s.summary ->> 'status') = %(status)s"
            " AND s.updated_at BETWEEN %(lower)s AND %(upper)s"
            " AND s.updated_at <= %(updated_at)s"
            " AND (s.updated_at < %(updated_at)s OR s.id > %(id)s)"
            " ORDER BY s.updated_at DESC, s.id LIMIT %(limit)s"
        ),
    }
