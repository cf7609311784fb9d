"""The PostgreSQL driver's statements: named queries, the ``where`` dialect, mutations.

Every statement's parameters are named where its text is written (``%(name)s``),
so no two places agree on an order: the driver fills a mapping. Static
statements are the ``-- name:`` sections of ``queries.sql``; a verb's optional
parts (the idempotency receipt, the notification, a delete-claim's archive) are
pieces added to its ``WITH`` list with psycopg's ``sql`` module, never edits of
written text. Identifiers are quoted by the driver (``sql.Identifier``), the
claim's limit is a ``sql.Literal``, compiled ``where`` SQL is inserted whole,
and every value is a bound parameter.

A statement names its logical table (``%(table)s``) and finds the table's id in
the store's tables catalog itself (``rows_table.sql`` says why rows carry ids):
one primary-key lookup of a small, cached table, in the same round trip, so no
process holds an id that a reset of the store could make stale. A statement
that inserts takes the id from the catalog row too: for a table the catalog
does not list, it inserts nothing, and the driver adds the name and writes again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from airflow_atomic_store.spec import Condition, Mutation, Ordering
from airflow_atomic_store.spec.paths import Segment
from airflow_atomic_store.spec.values import dumps as compact_dumps
from airflow_atomic_store.store.contract import ChosenSet
from airflow_atomic_store.store.sql import (
    Bind,
    OperatorSQL,
    Params,
    PathSQL,
    WhereCompiler,
    literal_sql,
    named_queries,
    order_sql,
)

MUTATION_ERROR_SQLSTATE = "AS001"
#: Raised by ``atomic_store_receipt_v1``: a keyed call's result is too large to record.
RESULT_TOO_LARGE_SQLSTATE = "AS002"
APPLY_FUNCTION = "atomic_store_apply_v1"
#: Adds to one JSON value by the reference rules (raises AS001 where they fail).
ADD_FUNCTION = "atomic_store_add_v1"

# -- JSON parameters: every float written as its exact value --------------------------
#
# ``jsonb`` stores a number as ``numeric`` and compares numbers by their decimal
# value, where Python (the reference evaluator) compares a float by its binary
# value: ``1733450000123456780 < 1.7334500001234568e18`` is false in Python, but
# true against the float's shortest decimal. Written as its exact decimal (every
# double has one), a float compares in ``jsonb`` as in Python against integers and
# floats alike, and still reads back as the same float; written positionally with
# a fractional digit, it reads back as a float, never an integer (as on SQLite).


def float_text(number: float) -> str:
    """The float's exact decimal, positional and with a fraction: ``0.5``, ``1e16`` → ``…0.0``.

    ``Decimal(float)`` is exact: ``0.1`` is ``0.1000000000000000055511151231257827…``
    (55 fractional digits), which ``json.loads`` reads back as ``0.1``.
    """
    text = format(Decimal(number), "f")
    return text if "." in text else text + ".0"


def exact_numeric(number: int | float) -> int | Decimal:
    """A number to bind as ``numeric``: integers as they are, floats by their exact value."""
    return number if isinstance(number, int) else Decimal(number)


def dumps(value: Any) -> str:
    """Compact JSON text of a validated value, every float written by :func:`float_text`."""
    return _exact(value) if _has_float(value) else compact_dumps(value)


def _has_float(value: Any) -> bool:
    kind = type(value)
    if kind is float:
        return True
    if kind is dict:
        return any(map(_has_float, value.values()))
    if kind is list:
        return any(map(_has_float, value))
    return False


def _exact(value: Any) -> str:
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, dict):
        items = (f"{compact_dumps(key)}:{_exact(item)}" for key, item in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_exact(item) for item in value) + "]"
    return compact_dumps(value)


def jsonb(value: Any) -> Jsonb:
    return Jsonb(value, dumps=dumps)


# -- the where dialect: jsonb SQL for each positive operator ---------------------------
#
# Each entry receives the path expressions, the kind of the condition value and a
# ``bind`` that writes the value (a named placeholder, or the value as a literal for a
# claimable set's condition). A positive form may yield SQL NULL for "false" (NULL
# behaves as false under AND/OR in a WHERE); negations wrap it in ``COALESCE(…, false)``
# first, so ``not_*`` is always the exact negation. ``CASE WHEN jsonb_typeof(...)``
# guards every cast: PostgreSQL does not promise the evaluation order of ``AND``, and
# casting a jsonb string to numeric raises.


def literal(value: Any) -> str:
    """A value (a path segment, a set's constant) as an SQL literal quoted by psycopg.

    ``%`` is doubled because the statement later goes through psycopg's
    placeholder parser, which does not know about string literals. Strings and
    integers (path segments, a set's constants, the table id: every claim through a
    set writes them) are remembered, by type as well as value: quoting without a
    connection depends on the value alone (a microsecond a claim saved).
    """
    if type(value) in _REMEMBERED:
        return _remembered_literal(value)
    return _quoted(value)


def _quoted(value: Any) -> str:
    return sql.Literal(value).as_string(None).replace("%", "%%")


_REMEMBERED = (str, int)  # exact types: a bool is an int, and True == 1
_remembered_literal = lru_cache(maxsize=1024, typed=True)(_quoted)


def jsonpath_literal(segments: tuple[Segment, ...]) -> str:
    """A strict SQL/JSON path for segments that include an array index."""
    path = "strict $"
    for segment in segments:
        if isinstance(segment, int):
            path += f"[{segment}]"
        else:
            path += '."' + segment.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return literal(path)


@lru_cache(maxsize=1024)
def path_sql(segments: tuple[Segment, ...], root: str = "r.value") -> PathSQL:
    """SQL for the value at a path; ``root`` names the rows table's ``value`` column.

    Cached: quoting through psycopg is a visible share of a primitive's client
    time, and a DAG uses the same few fields over and over.

    Key-only paths are a plain ``->`` chain, the form an expression index
    such as ``(value -> 'status')`` matches. ``->`` with an integer is not
    usable for array indexes: on a scalar, ``-> 0`` returns the scalar itself.
    Paths with an index therefore use a strict SQL/JSON path evaluated
    silently, which yields NULL whenever a step does not exist.
    """
    if all(isinstance(segment, str) for segment in segments):
        hops = [literal(segment) for segment in segments]
        parent = root + "".join(f" -> {hop}" for hop in hops[:-1])
        json_expr = f"({parent} -> {hops[-1]})"
        text_expr = f"({parent} ->> {hops[-1]})"
    else:
        json_expr = (
            f"jsonb_path_query_first({root}, {jsonpath_literal(segments)}::jsonpath, "
            "'{}'::jsonb, true)"
        )
        text_expr = f"({json_expr} #>> '{{}}')"
    return PathSQL(
        json=json_expr,
        text=text_expr,
        type=f"jsonb_typeof({json_expr})",
        literal=json_expr,
    )


def as_jsonb(value: Any) -> Jsonb:
    """A condition value as ``jsonb``, floats by their exact value as rows store them."""
    return jsonb(value)


def as_numeric(value: Any) -> Decimal | int:
    """A number as ``numeric``, a float by its exact value: ``numeric`` compares
    decimals, and only the exact one compares with an integer as Python does."""
    return exact_numeric(value)


def as_jsonb_array(values: Any) -> list[Jsonb]:
    return [jsonb(item) for item in values]


def as_text(value: Any) -> str:
    return str(value)


def _equals(path: PathSQL, kind: str, bind: Bind) -> str:
    # jsonb equality is deep and compares numbers by value; booleans and
    # numbers never equal each other. Written as a bare comparison so an
    # expression index on the path can serve it.
    return f"({path.json} = {bind(as_jsonb)}::jsonb)"


def _ordered(symbol: str) -> OperatorSQL:
    def compile_(path: PathSQL, kind: str, bind: Bind) -> str:
        if kind == "number":
            return (
                f"(CASE WHEN {path.type} = 'number' "
                f"THEN {path.json}::numeric {symbol} {bind(as_numeric)}::numeric END)"
            )
        return (
            f"(CASE WHEN {path.type} = 'string' "
            f'THEN {path.text} COLLATE "C" {symbol} {bind(as_text)}::text COLLATE "C" END)'
        )

    return compile_


def _in(path: PathSQL, kind: str, bind: Bind) -> str:
    return f"({path.json} = ANY({bind(as_jsonb_array)}::jsonb[]))"


def _element_equals(path: PathSQL, bind: Bind) -> str:
    return (
        f"EXISTS (SELECT 1 FROM jsonb_array_elements({path.json}) AS e(v) "
        f"WHERE e.v = {bind(as_jsonb)}::jsonb)"
    )


def _contains(path: PathSQL, kind: str, bind: Bind) -> str:
    if kind == "string":
        needle = bind(as_text)  # first: the values are bound in the order the text holds them
        return (
            f"(CASE {path.type} WHEN 'string' THEN strpos({path.text}, {needle}::text) > 0 "
            f"WHEN 'array' THEN {_element_equals(path, bind)} END)"
        )
    return f"(CASE WHEN {path.type} = 'array' THEN {_element_equals(path, bind)} END)"


def _starts_with(path: PathSQL, kind: str, bind: Bind) -> str:
    return (
        f"(CASE WHEN {path.type} = 'string' "
        f"THEN starts_with({path.text}, {bind(as_text)}::text) END)"
    )


def _ends_with(path: PathSQL, kind: str, bind: Bind) -> str:
    return (
        f"(CASE WHEN {path.type} = 'string' "
        f"THEN right({path.text}, char_length({bind(as_text)}::text)) = {bind(as_text)}::text END)"
    )


def _exists(path: PathSQL, kind: str, bind: Bind) -> str:
    return f"({path.json} IS NOT NULL)"


OPERATORS: dict[str, OperatorSQL] = {
    "equals": _equals,
    "gt": _ordered(">"),
    "gte": _ordered(">="),
    "lt": _ordered("<"),
    "lte": _ordered("<="),
    "in": _in,
    "contains": _contains,
    "starts_with": _starts_with,
    "ends_with": _ends_with,
    "exists": _exists,
}


class PostgresWhere:
    operators = OPERATORS
    placeholder = "%({})s"
    match_all = " AND "
    match_any = " OR "
    always_true = "TRUE"

    @staticmethod
    def path_sql(segments: tuple[Segment, ...], root: str = "r.value") -> PathSQL:
        return path_sql(segments, root)

    @staticmethod
    def literal_condition(path: PathSQL, positive: str, kind: str, value: Any) -> str:
        return literal_sql(OPERATORS[positive], path, kind, value, literal)

    @staticmethod
    def negate(condition: str) -> str:
        return f"(NOT COALESCE({condition}, false))"


# -- mutations: plain SQL where it can, else the function ------------------------------


def mutations_sql(mutations: Sequence[Mutation], row: str) -> tuple[str, Params]:
    """SQL for the ``row`` value after ``mutations``, and its parameters (``m0``, ``m1``…).

    The PL/pgSQL apply function handles every mutation, but calling it is slow
    enough to matter (docs/benchmarks.md), so the common shapes stay in plain SQL.
    Row values are always objects, so top-level fields merge into them with
    ``jsonb_concat`` (the function behind ``||``):

    - only ``set``s: one object, a later ``set`` of a field winning as in the
      reference ``apply``;
    - ``set``s and ``increment``s of distinct fields (no mutation sees
      another's result): ``jsonb_build_object`` with each increment inline.

    Anything else (nested paths, a field mutated twice) runs the function.
    """
    top_level = all(
        len(m.path.segments) == 1 and isinstance(m.path.segments[0], str) for m in mutations
    )
    if top_level and all(m.operation == "set" for m in mutations):
        merged = {m.path.segments[0]: m.value for m in mutations}
        return f"jsonb_concat({row}, %(m0)s)", {"m0": jsonb(merged)}
    if top_level and len({m.path.segments for m in mutations}) == len(mutations):
        pairs: list[str] = []
        params: Params = {}
        for mutation in mutations:
            name = f"m{len(params)}"
            pairs.append(f"%({name})s::text")
            params[name] = mutation.path.segments[0]
            if mutation.operation == "set":
                name = f"m{len(params)}"
                pairs.append(f"%({name})s::jsonb")
                params[name] = jsonb(mutation.value)
            else:
                pairs.append(_increment_sql(row, mutation, params))
        return f"jsonb_concat({row}, jsonb_build_object({', '.join(pairs)}))", params
    return (
        f"{APPLY_FUNCTION}({row}, %(m0)s)",
        {"m0": jsonb([mutation.to_json() for mutation in mutations])},
    )


#: The 64-bit range an integer increment's result must stay in (as in the reference).
_INT64_RANGE = "BETWEEN -9223372036854775808 AND 9223372036854775807"


def _increment_sql(row: str, mutation: Mutation, params: Params) -> str:
    """An increment of a top-level field, its parameters added to ``params``.

    An integer field plus an integer delta whose sum fits 64 bits (a counter, a
    token bucket) is summed in SQL. Every other case (a missing or null field, a
    float on either side, a non-number, an overflow) goes to
    ``atomic_store_add_v1``, which owns those rules and their errors; the SQL
    branch computes exactly what that function's integer branch would. ``CASE``
    tests the type before the numeric cast sees the value, and ``COALESCE``
    calls the function only when that branch gave nothing.
    """
    current = path_sql(mutation.path.segments, root=row).json
    delta, field = f"m{len(params)}", f"m{len(params) + 1}"
    params[field] = mutation.path.text
    if isinstance(mutation.value, bool) or not isinstance(mutation.value, int):
        params[delta] = jsonb(mutation.value)
        return f"{ADD_FUNCTION}({current}, %({delta})s, %({field})s)"
    params[delta] = mutation.value
    return _integer_increment_sql(current, delta, field)


@lru_cache(maxsize=256)
def _integer_increment_sql(current: str, delta: str, field: str) -> str:
    total = f"({current}::numeric + %({delta})s::numeric)"
    return (
        f"COALESCE(CASE WHEN jsonb_typeof({current}) = 'number' THEN "
        f"CASE WHEN scale({current}::numeric) = 0 AND {total} {_INT64_RANGE} "
        f"THEN to_jsonb({total}) END END, "
        f"{ADD_FUNCTION}({current}, to_jsonb(%({delta})s::numeric), %({field})s))"
    )


# -- statements -----------------------------------------------------------------------

#: The id of the statement's logical table: looked up by the statement itself.
_TABLE_ID = sql.SQL("(SELECT id FROM {tables} WHERE name = %(table)s)")
#: The claim's selection: shared by the claim itself and ``explain_claim``.
#: The limit (validated, 1..1000) is a literal: with ``LIMIT $n`` PostgreSQL's
#: generic plan assumes a tenth of the table is wanted, is never preferred, and
#: every claim pays for planning again; with the number in the text, a prepared
#: claim is planned once per connection.
_PICK = sql.SQL(
    "SELECT r.table_id, r.key, r.{order_column} AS claim_order "
    "FROM {table} AS r WHERE {table_filter} AND {where} "
    "ORDER BY {order} LIMIT {limit} FOR UPDATE SKIP LOCKED"
)
#: Capped and unlocked: a trigger asks whether work is there, it never claims it.
_COUNT = sql.SQL(
    "SELECT count(*), min(CASE WHEN n = 1 THEN key END) FROM (SELECT r.key, "
    "row_number() OVER (ORDER BY {order}) AS n FROM {table} AS r "
    "WHERE {table_filter} AND {where} ORDER BY {order} LIMIT {limit}) AS matching"
)
_QUERY = sql.SQL(
    "SELECT r.key, r.value::text FROM {table} AS r WHERE r.table_id = {table_id} AND {where} "
    "ORDER BY {order} LIMIT %(limit)s"
)
_UPDATE = sql.SQL(
    "UPDATE {table} AS r SET value = {apply}, record_timestamp = clock_timestamp() "
    "WHERE r.table_id = {table_id} AND r.key = %(key)s AND {where} RETURNING r.value"
)
_MARK_PICKED = sql.SQL(
    "UPDATE {table} AS t SET value = {apply}, record_timestamp = clock_timestamp() "
    "FROM picked WHERE t.table_id = picked.table_id AND t.key = picked.key "
    "RETURNING t.key, {value}, picked.claim_order"
)
#: A delete-claim removes its picked rows and returns them as they were.
_DELETE_PICKED = sql.SQL(
    "DELETE FROM {table} AS t USING picked "
    "WHERE t.table_id = picked.table_id AND t.key = picked.key "
    "RETURNING t.key, {value}, picked.claim_order"
)
#: A delete-claim with an archive picks nothing unless the catalog lists the archive
#: (rows are never deleted into a table without an id), and copies what it deleted.
_ARCHIVE_LISTED = sql.SQL("EXISTS (SELECT FROM {tables} WHERE name = %(archive)s)")
_ARCHIVE = sql.SQL(
    "INSERT INTO {table} AS a (table_id, key, value) "
    "SELECT c.id, e.key, e.value FROM effect AS e, {tables} AS c WHERE c.name = %(archive)s "
    "ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = EXCLUDED.value, record_timestamp = clock_timestamp()"
)
#: A row of NULLs when the archive is not listed: the driver adds it and claims again.
_ARCHIVE_UNLISTED = sql.SQL(
    " UNION ALL SELECT NULL, NULL, NULL WHERE NOT EXISTS "
    "(SELECT FROM {tables} WHERE name = %(archive)s)"
)
#: The catalog row's id as an inserted row's: a table the catalog does not list
#: inserts nothing. (A foreign key would take a KEY SHARE lock on the catalog row per
#: insert, and concurrent inserts into one table would share it through multixacts.)
_INSERT = sql.SQL(
    "INSERT INTO {table} AS t (table_id, key, value) "
    "SELECT c.id, %(key)s, %(value)s FROM {tables} AS c WHERE c.name = %(table)s"
)
_UPSERT = sql.SQL(
    "{insert} ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = {apply}, record_timestamp = clock_timestamp() "
    "RETURNING t.value, (t.xmax = 0) AS inserted"
)
_PUT = sql.SQL(
    "{insert} ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = EXCLUDED.value, record_timestamp = clock_timestamp()"
)
#: A seed inserts the row if absent, else reads it: a duplicate delivery writes nothing.
_SEED_INSERTED = sql.SQL("{insert} ON CONFLICT (table_id, key) DO NOTHING RETURNING value")
_SEED_EFFECT = sql.SQL(
    "SELECT value, true AS inserted FROM inserted UNION ALL "
    "SELECT value, false FROM {table} WHERE table_id = {table_id} AND key = %(key)s "
    "AND NOT EXISTS (SELECT FROM inserted)"
)
#: With an idempotency key, the receipt is written by the same statement as the effect;
#: a receipt already under that key aborts the statement (the driver's ``_keyed``).
#: ``atomic_store_receipt_v1`` refuses a result over the receipt's size limit, so the
#: statement fails whole (``ResultTooLargeError``).
_RECEIPT = sql.SQL(
    "INSERT INTO {receipts} (idempotency_key, primitive, table_name, target, result, expires_at) "
    "SELECT %(receipt_key)s, %(receipt_primitive)s, %(receipt_table)s, %(receipt_target)s, "
    "atomic_store_receipt_v1({result}, %(receipt_max_bytes)s), "
    "clock_timestamp() + make_interval(secs => %(receipt_retention)s) {source}"
)
#: ``pg_notify`` runs once, and only when ``changed`` has rows (a write that changed
#: nothing wakes nobody).
_NOTIFIED = sql.SQL("SELECT pg_notify(%(channel)s, '') WHERE EXISTS (SELECT FROM {changed})")

#: What each keyed verb records as its result, read from its ``effect`` CTE, and the
#: receipt's ``FROM`` (an upsert records only what it inserted or updated).
_RECORDED = {
    "update": (sql.SQL("jsonb_build_array((SELECT value FROM effect))"), sql.SQL("")),
    # In claim order as the driver returns it (``in_claim_order``: ties by key in code
    # point order, which is "C" collation's order for UTF-8), so a replay, whatever
    # direction it asks for, returns the first call's batch as it was.
    "claim": (
        sql.SQL(
            "COALESCE((SELECT jsonb_agg(jsonb_build_array(key, value) "
            'ORDER BY claim_order {direction}, key COLLATE "C" {direction}) FROM effect), '
            "'[]'::jsonb)"
        ),
        sql.SQL(""),
    ),
    "upsert": (sql.SQL("jsonb_build_array(inserted, value)"), sql.SQL("FROM effect")),
}


# -- many rows per call (issue 42) ------------------------------------------------------
#
# ``upsert_many`` binds the call's keys as one ``text[]`` and their values as one
# ``jsonb`` array (``ROWS FROM`` zips them, ``WITH ORDINALITY`` numbers them): 10,000
# items are one round trip and one statement, as pgmq's ``send_batch``. Rows are inserted
# in key order ("C" collation, the rows table's): two calls over overlapping keys wait for
# each other's keys in the same order and never deadlock. Each row's ``created_at`` is the
# statement's start plus its item's position in microseconds, so a queue takes one call's
# items in the order given. An item with mutations, when its row exists, gets them through
# ``atomic_store_apply_v1`` (the items' mutations bound as one jsonb object by key).
#
# ``update_many`` looks each key up by the primary key and locks its row, in key order,
# judges ``where`` on the locked (newest) version of each row on its own, then updates the
# rows that passed (or, with an archive table, deletes them and writes them there with
# their new value) in the same statement: the claim's two steps, by key, without ``SKIP
# LOCKED``. Each key is one lookup, fenced (``OFFSET 0``) so that the planner cannot trade
# them for a scan of the logical table's rows.

_MANY_INPUT = sql.SQL(
    'input AS MATERIALIZED (SELECT i.key COLLATE "C" AS key, i.value, i.ord '
    "FROM ROWS FROM (unnest(%(keys)s::text[]), jsonb_array_elements(%(values)s::jsonb)) "
    "WITH ORDINALITY AS i(key, value, ord))"
)
#: The table's catalog row: one row when it is listed, none when not (nothing inserts).
_MANY_LISTED = sql.SQL("listed AS (SELECT c.id FROM {tables} AS c WHERE c.name = %(table)s)")
_MANY_INSERT = sql.SQL(
    "INSERT INTO {table} AS t (table_id, key, value, created_at, record_timestamp) "
    "SELECT listed.id, i.key, i.value, {stamp}, {stamp} FROM input AS i, listed ORDER BY i.key"
)
_MANY_STAMP = sql.SQL("statement_timestamp() + (i.ord - 1) * interval '1 microsecond'")
#: Seeds only: a row that exists is left alone, and only inserted rows come back.
_MANY_SEED = sql.SQL("effect AS ({insert} ON CONFLICT (table_id, key) DO NOTHING RETURNING t.key)")
#: Some items carry mutations (``%(mutations)s``: a jsonb object, by key): those rows
#: that exist get them; the others are left alone (the ``WHERE`` of ``DO UPDATE``).
_MANY_MUTATE = sql.SQL(
    "effect AS ({insert} ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = {apply}(t.value, %(mutations)s::jsonb -> t.key), "
    "record_timestamp = clock_timestamp() "
    "WHERE jsonb_exists(%(mutations)s::jsonb, t.key) "
    "RETURNING t.key, (t.xmax = 0) AS inserted)"
)
_MANY_INSERTED = {
    False: sql.SQL("SELECT key FROM effect"),
    True: sql.SQL("SELECT key FROM effect WHERE inserted"),
}
#: A bulk verb's receipt records its keys (``recorded``), only when its table is listed.
_MANY_RECEIPT = sql.SQL(
    "receipt AS (INSERT INTO {receipts} "
    "(idempotency_key, primitive, table_name, target, result, expires_at) "
    "SELECT %(receipt_key)s, %(receipt_primitive)s, %(receipt_table)s, %(receipt_target)s, "
    "atomic_store_receipt_v1(to_jsonb(ARRAY({recorded})), %(receipt_max_bytes)s), "
    "clock_timestamp() + make_interval(secs => %(receipt_retention)s) {source})"
)
_MANY_NOTIFIED = sql.SQL(
    "notified AS (SELECT pg_notify(%(channel)s, '') AS sent WHERE EXISTS (SELECT FROM effect))"
)
_MANY_UPSERTED = sql.SQL("SELECT EXISTS (SELECT FROM listed), ARRAY({inserted}){notified}")
#: The keys come sorted in code point order (the "C" collation's) and are looked up, so
#: locked, in that order, as ``upsert_many`` inserts: no deadlock between them.
_MANY_PICK = sql.SQL(
    "picked AS MATERIALIZED (SELECT r.table_id, r.key FROM unnest(%(keys)s::text[]) AS k(key) "
    "CROSS JOIN LATERAL (SELECT t.table_id, t.key, t.value FROM {table} AS t "
    "WHERE t.table_id = {table_id} AND t.key = k.key OFFSET 0) AS r "
    "WHERE {where}{archive_listed} FOR UPDATE OF r)"
)
#: Joined on the picked rows' own ``(table_id, key)``: the primary key is the plan.
_MANY_UPDATE_PICKED = sql.SQL(
    "effect AS (UPDATE {table} AS t SET value = {apply}, record_timestamp = clock_timestamp() "
    "FROM picked WHERE t.table_id = picked.table_id AND t.key = picked.key RETURNING t.key)"
)
#: The rows leave with their new value, which replaces an archived row of the same key.
_MANY_ARCHIVE_PICKED = sql.SQL(
    "effect AS (DELETE FROM {table} AS t USING picked WHERE t.table_id = picked.table_id "
    "AND t.key = picked.key RETURNING t.key, {apply} AS value), "
    "archived AS (INSERT INTO {table} AS a (table_id, key, value) "
    "SELECT c.id, e.key, e.value FROM effect AS e, {tables} AS c WHERE c.name = %(archive)s "
    "ON CONFLICT (table_id, key) DO UPDATE "
    "SET value = EXCLUDED.value, record_timestamp = clock_timestamp())"
)


@dataclass(frozen=True)
class Extras:
    """A write's optional parts: the receipt it records, the channel it notifies, the
    archive a delete-claim copies into."""

    receipt: bool = False
    notify: bool = False
    archive: bool = False


def _cte(name: str, body: sql.Composable, *, materialized: bool = False) -> sql.Composed:
    keyword = " AS MATERIALIZED " if materialized else " AS "
    return sql.Composed([sql.SQL(name + keyword + "("), body, sql.SQL(")")])


def _with(
    ctes: list[sql.Composable], final: sql.Composable, extras: Extras, *, changed: str
) -> sql.Composed:
    """``WITH <ctes>[, notified] <final>``.

    A CTE runs only if referenced, hence the notification's join: it has no
    column the final ``SELECT`` names.
    """
    if extras.notify:
        ctes = [*ctes, _cte("notified", _NOTIFIED.format(changed=sql.SQL(changed)))]
        final = sql.SQL("{} LEFT JOIN notified ON true").format(final)
    return sql.SQL("WITH {} {}").format(sql.SQL(", ").join(ctes), final)


class Statements:
    """One store's statements, built once per shape and cached; ``where`` compiled.

    :param table_name: the storage table (validated).
    """

    def __init__(self, table_name: str) -> None:
        self._table = sql.Identifier(table_name)
        self._receipts = sql.Identifier(f"{table_name}_receipts")
        self._tables = sql.Identifier(f"{table_name}_tables")
        self._table_id = _TABLE_ID.format(tables=self._tables)
        self._insert = _INSERT.format(table=self._table, tables=self._tables)
        self.where = WhereCompiler(PostgresWhere())
        identifiers = {"table": self._table, "receipts": self._receipts, "tables": self._tables}
        self.queries = {
            name: sql.SQL(statement).format(**identifiers).as_string(None).encode()
            for name, statement in named_queries(__package__).items()
        }
        self.put = lru_cache(maxsize=2)(self._put)
        self.update = lru_cache(maxsize=512)(self._update)
        self.claim = lru_cache(maxsize=512)(self._claim)
        self.upsert = lru_cache(maxsize=512)(self._upsert)
        self.seed = lru_cache(maxsize=4)(self._seed)
        self.selection = lru_cache(maxsize=512)(self._selection)
        self.query = lru_cache(maxsize=256)(self._query)
        self.upsert_many = lru_cache(maxsize=8)(self._upsert_many)
        self.update_many = lru_cache(maxsize=256)(self._update_many)

    def _receipt(self, primitive: str, ordering: Ordering | None = None) -> sql.Composed:
        result, source = _RECORDED[primitive]
        direction = sql.SQL(ordering.direction.upper() if ordering else "")
        return _RECEIPT.format(
            receipts=self._receipts, result=result.format(direction=direction), source=source
        )

    def _finish(self, statement: sql.Composable) -> bytes:
        return statement.as_string(None).encode()

    def _put(self, extras: Extras) -> bytes:
        put = _PUT.format(insert=self._insert)
        if not extras.notify:
            return self._finish(put)
        effect = _cte("effect", sql.SQL("{} RETURNING 1").format(put))
        return self._finish(
            _with([effect], sql.SQL("SELECT 1 FROM effect"), extras, changed="effect")
        )

    def _update(self, where_sql: str, apply: str, extras: Extras) -> bytes:
        effect = _UPDATE.format(
            table=self._table,
            table_id=self._table_id,
            apply=sql.SQL(apply),
            where=sql.SQL(where_sql),
        )
        return self._effect_statement(effect, "update", extras, sql.SQL("SELECT value FROM effect"))

    def _upsert(self, apply: str, extras: Extras) -> bytes:
        effect = _UPSERT.format(insert=self._insert, apply=sql.SQL(apply))
        final = sql.SQL("SELECT value, inserted FROM effect")
        return self._effect_statement(effect, "upsert", extras, final)

    def _effect_statement(
        self, effect: sql.Composed, primitive: str, extras: Extras, final: sql.Composable
    ) -> bytes:
        """The bare effect, or the effect as a CTE with the parts ``extras`` asks for."""
        if extras == Extras():
            return self._finish(effect)
        ctes: list[sql.Composable] = [_cte("effect", effect)]
        if extras.receipt:
            ctes.append(_cte("receipt", self._receipt(primitive)))
        return self._finish(_with(ctes, final, extras, changed="effect"))

    def _claim(
        self, where_sql: str, ordering: Ordering, limit: int, apply: str | None, extras: Extras
    ) -> bytes:
        """A claim: ``apply`` marks the picked rows; ``apply`` None deletes them."""
        table_filter = self._table_filter(archive=extras.archive)
        picked = _cte(
            "picked",
            self._pick(_PICK, where_sql, ordering, limit, table_filter),
            materialized=True,
        )
        if extras == Extras():
            # Each value as its JSON text, decoded by the driver in one call for the batch.
            take = self._take(apply, sql.SQL("t.value::text"))
            return self._finish(sql.SQL("WITH {} {}").format(picked, take))
        # The CTEs that read ``effect`` (a receipt, an archive) keep the jsonb.
        ctes: list[sql.Composable] = [picked, _cte("effect", self._take(apply, sql.SQL("t.value")))]
        final: sql.Composable = sql.SQL("SELECT key, value::text, claim_order FROM effect")
        if extras.archive:
            ctes.append(_cte("archived", _ARCHIVE.format(table=self._table, tables=self._tables)))
            final = sql.Composed([final, _ARCHIVE_UNLISTED.format(tables=self._tables)])
        if extras.receipt:
            ctes.append(_cte("receipt", self._receipt("claim", ordering)))
        return self._finish(_with(ctes, final, extras, changed="effect"))

    def _take(self, apply: str | None, value: sql.SQL) -> sql.Composed:
        """What a claim does to its picked rows: mark them (``apply``), or delete them."""
        if apply is None:
            return _DELETE_PICKED.format(table=self._table, value=value)
        return _MARK_PICKED.format(table=self._table, apply=sql.SQL(apply), value=value)

    def _seed(self, extras: Extras) -> bytes:
        ctes: list[sql.Composable] = [
            _cte("inserted", _SEED_INSERTED.format(insert=self._insert)),
            _cte("effect", _SEED_EFFECT.format(table=self._table, table_id=self._table_id)),
        ]
        if extras.receipt:
            ctes.append(_cte("receipt", self._receipt("upsert")))
        final = sql.SQL("SELECT value, inserted FROM effect")
        return self._finish(_with(ctes, final, extras, changed="inserted"))

    def _table_filter(self, *, archive: bool = False) -> sql.Composable:
        table_filter = sql.SQL("r.table_id = {}").format(self._table_id)
        if not archive:
            return table_filter
        listed = _ARCHIVE_LISTED.format(tables=self._tables)
        return sql.SQL("{} AND {}").format(table_filter, listed)

    def _pick(
        self,
        template: sql.SQL,
        where_sql: str,
        ordering: Ordering,
        limit: int,
        table_filter: sql.Composable,
    ) -> sql.Composed:
        return template.format(
            table=self._table,
            table_filter=table_filter,
            where=sql.SQL(where_sql),
            order=sql.SQL(order_sql(ordering)),
            order_column=sql.SQL(ordering.column),  # a validated column name, as order_sql
            limit=sql.Literal(limit),
        )

    def _selection(self, kind: str, where_sql: str, ordering: Ordering, limit: int) -> bytes:
        """A read over the claim's selection: ``pick`` (explain) or ``count`` (triggers)."""
        template = _PICK if kind == "pick" else _COUNT
        return self._finish(self._pick(template, where_sql, ordering, limit, self._table_filter()))

    def _query(self, where_sql: str, ordering: Ordering) -> bytes:
        return self._finish(
            _QUERY.format(
                table=self._table,
                table_id=self._table_id,
                where=sql.SQL(where_sql),
                order=sql.SQL(order_sql(ordering)),
            )
        )

    def _upsert_many(self, mutating: bool, keyed: bool, notify: bool) -> bytes:
        insert = _MANY_INSERT.format(stamp=_MANY_STAMP, table=self._table)
        effect = (_MANY_MUTATE if mutating else _MANY_SEED).format(
            insert=insert, apply=sql.Identifier(APPLY_FUNCTION)
        )
        ctes = [_MANY_INPUT, _MANY_LISTED.format(tables=self._tables), effect]
        if keyed:
            recorded = _MANY_INSERTED[mutating]
            source = sql.SQL("FROM listed")
            ctes.append(
                _MANY_RECEIPT.format(receipts=self._receipts, recorded=recorded, source=source)
            )
        if notify:
            ctes.append(_MANY_NOTIFIED)
        final = _MANY_UPSERTED.format(
            inserted=_MANY_INSERTED[mutating],
            notified=sql.SQL(", (SELECT count(*) FROM notified)" if notify else ""),
        )
        return self._finish(sql.SQL("WITH {} {}").format(sql.SQL(", ").join(ctes), final))

    def _update_many(
        self, where_sql: str, apply: str, keyed: bool, notify: bool, archiving: bool
    ) -> bytes:
        archive_listed = (
            sql.SQL(" AND {}").format(_ARCHIVE_LISTED.format(tables=self._tables))
            if archiving
            else sql.SQL("")
        )
        picked = _MANY_PICK.format(
            table=self._table,
            table_id=self._table_id,
            where=sql.SQL(where_sql),
            archive_listed=archive_listed,
        )
        take = _MANY_ARCHIVE_PICKED if archiving else _MANY_UPDATE_PICKED
        ctes: list[sql.Composable] = [
            picked,
            take.format(table=self._table, tables=self._tables, apply=sql.SQL(apply)),
        ]
        if keyed:
            recorded = sql.SQL("SELECT key FROM effect")
            ctes.append(
                _MANY_RECEIPT.format(receipts=self._receipts, recorded=recorded, source=sql.SQL(""))
            )
        final: sql.Composable = sql.SQL("SELECT key FROM effect")
        if notify:
            ctes.append(_MANY_NOTIFIED)
            final = sql.SQL("SELECT key FROM effect LEFT JOIN notified ON true")
        if archiving:  # a row of NULL when the archive is not listed: list it, and again
            final = sql.Composed(
                [
                    final,
                    sql.SQL(" UNION ALL SELECT NULL WHERE NOT "),
                    _ARCHIVE_LISTED.format(tables=self._tables),
                ]
            )
        return self._finish(sql.SQL("WITH {} {}").format(sql.SQL(", ").join(ctes), final))

    def selection_where(
        self, where: Sequence[Condition], match: str, chosen: ChosenSet | None
    ) -> tuple[str, Params]:
        """A selection's ``where`` SQL and parameters.

        With a claimable set, the conditions the set covers are literals, so the
        planner proves the set's index predicate from the text, for custom and
        generic plans alike; the table stays bound (the set's index leads with it).
        """
        if chosen is None:
            return self.where.compile(where, match)
        if chosen.predicate is None:
            return self.where.compile(where, match, chosen.inline)
        return self.where.compile(chosen.predicate, match, range(len(chosen.predicate)))
