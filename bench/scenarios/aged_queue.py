"""Scenario 7 (issue 10): a queue that keeps its history, 10x as many done rows as pending.

Five drains side by side for each claimer count and batch size, their order
rotating from one configuration to the next, each on a freshly loaded,
vacuumed table, by separate claimer processes:

- ``recipe``: ``AtomicStore(url)`` as the queue recipe calls it, on a store as
  deployed: its schema made the ``status equals pending`` set when the store was
  created, and the history was loaded beneath it (claims build nothing);
- ``grown``: the same (it was, before 0.1.0, the queue whose first claim built
  an automatic set while it was young; kept so figures compare across releases);
- ``declared``: the set declared with ``ensure_claim_index`` over the loaded
  history (a compact, freshly built index);
- ``pgmq``: pgmq-shaped read+delete on pgmq's table layout
  (:mod:`bench.readdelete_queue`): deleted messages leave no history;
- ``partial``: the hand-written claim on the store's table with a hand-made
  partial index of the pending rows, the physical limit for this layout;
- ``delete``: ``atomic_claim(mode="delete")`` on the ``grown`` queue (issue 33):
  the claim takes the rows out of the table, as read+delete does;
- ``pop``: pgmq-shaped ``pop``, one DELETE … RETURNING of the oldest visible
  messages (SKIP LOCKED): at most once, as the delete-claim is.

The targets' configuration (4 claimers, batch 10) alternates its five drains
``aged_target_repeats`` more times: one drain moves by ±15 %, so the targets
read medians (``target_samples``).

Then per-call costs on the same kind of queue (:mod:`bench.aged_calls`) and
the SQLite drain (:mod:`bench.aged_sqlite`).
"""

from __future__ import annotations

import statistics
from typing import Any

from bench import aged_calls, aged_sqlite, loading, readdelete_queue
from bench.drainers import run_drain
from bench.environment import BenchEnvironment
from bench.sizes import Sizes
from bench.timing import progress

TITLE = "Aged queue"

#: drain name -> claimer kind in :mod:`bench.drainers`
DRAINS = {
    "recipe": "store",
    "declared": "store_unassisted",
    "pgmq": "readdelete",
    "partial": "partial",
    "grown": "store",
    "delete": "store_delete",
    "pop": "pop",
}
NAMES = {
    "recipe": "(a) store, recipe",
    "declared": "(b) store, declared set",
    "pgmq": "(c) pgmq-shaped",
    "partial": "(d) hand-written partial index",
    "grown": "(e) store, recipe, history grown under it",
    "delete": "(f) store, delete mode",
    "pop": "(g) pgmq-shaped pop",
}
#: drains on pgmq's own table layout (the rest run on the store's table)
PGMQ_LAYOUT = ("pgmq", "pop")


def _prepare(name: str, url: str, queue_url: str, sizes: Sizes) -> str:
    pending = sizes.aged_pending
    if name in PGMQ_LAYOUT:
        readdelete_queue.load(queue_url, pending)
        return queue_url
    total = pending * (1 + sizes.aged_history_factor)
    loading.load_queue(
        url,
        total,
        pending=pending,
        claim_index=name == "declared",
        hand_index=name == "partial",
        grown=name in ("recipe", "grown", "delete"),
    )
    return url


#: The configuration the issue's drain targets name: 4 claimers, batch 10.
TARGET_CELL = (4, 10)


def configuration(
    url: str,
    queue_url: str,
    sizes: Sizes,
    processes: int,
    batch: int,
    turn: int,
    drains: tuple[str, ...] = tuple(DRAINS),
) -> dict[str, Any]:
    """The ``drains`` of one configuration, back to back, starting at ``turn``'s drain."""
    names = list(drains)
    entry: dict[str, Any] = {"processes": processes, "batch": batch}
    turn %= len(names)
    order = names[turn:] + names[:turn]
    for name in order:
        target = _prepare(name, url, queue_url, sizes)
        result = run_drain(DRAINS[name], target, batch, processes, sizes.aged_cap_seconds)
        entry[name] = result
        if name == "recipe":
            entry["recipe_plan"] = loading.claim_plan(url, batch, generic=True)
    entry["order"] = order
    progress(
        f"aged p={processes} batch={batch}: "
        + ", ".join(f"{n} {entry[n]['rate']:,.0f}" for n in names)
        + " rows/s"
    )
    return entry


def _drains(url: str, queue_url: str, sizes: Sizes) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for processes in sizes.aged_processes:
        for batch in sizes.aged_batches:
            rows.append(configuration(url, queue_url, sizes, processes, batch, len(rows)))
    return rows


def _target_repeats(url: str, queue_url: str, sizes: Sizes) -> list[dict[str, Any]]:
    """More alternations at :data:`TARGET_CELL`, each starting with the next drain."""
    processes, batch = TARGET_CELL
    return [
        configuration(url, queue_url, sizes, processes, batch, turn + 1)
        for turn in range(sizes.aged_target_repeats)
    ]


def drains_in(entries: list[dict[str, Any]]) -> list[str]:
    """The drains every entry has, in :data:`DRAINS` order (older data lacks ``grown``)."""
    return [name for name in DRAINS if all(name in entry for entry in entries)]


def target_samples(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every alternation of the drains at :data:`TARGET_CELL`: the grid's and the repeats'."""
    grid = [e for e in data["drains"] if (e["processes"], e["batch"]) == TARGET_CELL]
    return grid + list(data.get("target_repeats", ()))


def target_median(samples: list[dict[str, Any]], name: str) -> float:
    """The median rows/s of one drain over the target cell's alternations."""
    return statistics.median(sample[name]["rate"] for sample in samples)


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    url = env.postgres_url()
    loading.create_schema(url)
    pending = sizes.aged_pending
    history = pending * sizes.aged_history_factor
    data: dict[str, Any] = {
        "pending": pending,
        "history": history,
        "cap_seconds": sizes.aged_cap_seconds,
        "drains": _drains(url, env.postgres_url("readdelete"), sizes),
        "target_repeats": _target_repeats(url, env.postgres_url("readdelete"), sizes),
        "latency": aged_calls.claim_latency(url, sizes),
        "stale": aged_calls.stale_pass(url, sizes),
        "history_curve": aged_calls.history_curve(url, sizes),
        "sqlite": aged_sqlite.run(env, pending, history, sizes.aged_sqlite_rounds),
    }
    loading.drop_claim_indexes(url)  # later scenarios start without this scenario's sets
    return data


# -- report ----------------------------------------------------------------------------


def _rate(result: dict[str, Any]) -> str:
    return f"{result['rate']:,.0f}{' †' if result['capped'] else ''}"


def _vs(result: dict[str, Any], base: dict[str, Any]) -> str:
    return f"{result['rate'] / base['rate']:.2f}x" if base["rate"] else "-"


def sqlite_rate(data: dict[str, Any], variant: str, measure: str = "rate") -> float:
    """Mean rows/s of a SQLite variant's drains (``cpu_rate``: rows per CPU second)."""
    drains = data["sqlite"]["drains"][variant]
    return sum(d[measure] for d in drains) / len(drains)


def section(data: dict[str, Any]) -> str:
    from bench.report_format import ratio, table

    names = drains_in(data["drains"])
    lines = [
        f"{data['pending']:,} pending rows over {data['history']:,} done rows (the pgmq-shaped "
        "queue holds only the pending messages: it deletes what it consumed). Rows/s over the "
        f"whole drain, the {len(names)} drains of a row run back to back in rotating order, "
        f"each on a freshly loaded table. † = cut at the {data['cap_seconds']:g} s cap. "
        "*(a) first claim* is the slowest first claim of the (a) drain (the one that declares "
        "the set over the loaded history); *(a) per claimer* the rows each claimer won."
        + (
            " (e) runs (a)'s claim on a queue whose first claim came when it was new and "
            "empty (it declared the set then), the history loaded beneath it afterwards."
            if "grown" in names
            else ""
        )
        + (
            ' (f) delete-claims the same queue as (e) (`mode="delete"`: the rows leave the '
            "table in the claim); (g) is pgmq-shaped `pop`, one DELETE … RETURNING (SKIP "
            "LOCKED) on (c)'s table."
            if "delete" in names
            else ""
        ),
        "",
    ]
    compared = [name for name in names if name != "pgmq"]
    body = []
    for e in data["drains"]:
        base = e["pgmq"]
        body.append(
            [
                str(e["processes"]),
                str(e["batch"]),
                *(_rate(e[name]) for name in names),
                *(_vs(e[name], base) for name in compared),
                str(sum(e[name]["duplicates"] for name in names)),
                f"{e['recipe']['first_ms']:.0f} ms",
                "/".join(f"{n:,}" for n in e["recipe"]["per_process"]),
            ]
        )
    lines += table(
        [
            "claimers",
            "batch",
            *(f"{NAMES[name]} rows/s" for name in names),
            *(f"{NAMES[name][:3]} ÷ (c)" for name in compared),
            "dup",
            "(a) first claim",
            "(a) per claimer",
        ],
        body,
    )
    lines += target_cell_table(data)
    lat, stale = data["latency"], data["stale"]
    lines += [
        "",
        f"**Per call, default path** (`AtomicStore(url)`; the first call of a filter declares "
        f"its set and is left out: limit-1 claim {lat['first_ms']:.0f} ms, stale pass "
        f"{stale['first_ms']['stale']:.0f} ms, drain claim {stale['first_ms']['drain']:.0f} ms). "
        "Limit-1 claims and the latency scenario's guarded update "
        f"{'(store and hand-written) ' if 'sql_claim' in lat else ''}alternate in rounds "
        f"({lat['calls']:,} calls each); the stale pass (`status equals in_flight AND claimedAt "
        f"lt now - 10 min`, limit 10, {stale['stale_rows']} stale rows among the newest history "
        f"rows, {stale['stale_rows_per_call']:.1f} rows per call) alternates with the drain's "
        f"claim of 10 ({stale['calls']} calls each).",
        "",
    ]
    update = lat["update"]["p50_ms"]
    drain = stale["drain"]["p50_ms"]
    lines += table(
        ["call", "p50 ms", "p99 ms", "p50 ratio", "ratio to"],
        [
            [
                "claim, limit 1",
                f"{lat['claim']['p50_ms']:.3f}",
                f"{lat['claim']['p99_ms']:.3f}",
                ratio(lat["claim"]["p50_ms"], update),
                "guarded update",
            ],
            [
                "guarded update (one row)",
                f"{update:.3f}",
                f"{lat['update']['p99_ms']:.3f}",
                "1.00x",
                "",
            ],
            *_hand_rows(lat),
            [
                "stale pass, limit 10",
                f"{stale['stale']['p50_ms']:.3f}",
                f"{stale['stale']['p99_ms']:.3f}",
                ratio(stale["stale"]["p50_ms"], drain),
                "drain claim",
            ],
            [
                "drain claim, limit 10",
                f"{drain:.3f}",
                f"{stale['drain']['p99_ms']:.3f}",
                "1.00x",
                "",
            ],
        ],
    )
    curve = data["history_curve"]
    base = curve[0]
    lines += [
        "",
        "**Claim cost against history** (default path, claim of 10, p50 over "
        "claims after the first; the first size measured again at the end to show drift):",
        "",
        *table(
            ["done rows", "pending", "first claim ms", "p50 ms", "p99 ms", "vs first size"],
            [
                [
                    f"{e['history']:,}{' (again)' if e['again'] else ''}",
                    f"{e['pending']:,}",
                    f"{e['first_ms']:.0f}",
                    f"{e['p50_ms']:.3f}",
                    f"{e['p99_ms']:.3f}",
                    ratio(e["p50_ms"], base["p50_ms"]),
                ]
                for e in curve
            ],
        ),
    ]
    lines += ["", *_sqlite_table(data)]
    lines += [
        "",
        "Generic plans (`explain_claim(generic=True)`), first scan node: drain claim "
        f"`{stale['plan_drain']}`; stale pass `{stale['plan_stale']}`; limit 1 `{lat['plan']}`; "
        + "; ".join(f"{e['history']:,} done rows `{e['plan']}`" for e in curve if not e["again"])
        + ".",
    ]
    return "\n".join(lines)


def target_cell_table(data: dict[str, Any]) -> list[str]:
    """The target configuration's drains, alternated again (absent from older data)."""
    from bench.report_format import table

    samples = target_samples(data)
    if not data.get("target_repeats"):
        return []
    processes, batch = TARGET_CELL
    queue = target_median(samples, "pgmq")
    names = drains_in(samples)
    measured = all("server_us_per_row" in sample[name] for sample in samples for name in names)
    rows = []
    for name in names:
        rates = [sample[name]["rate"] for sample in samples]
        ratios = [sample[name]["rate"] / sample["pgmq"]["rate"] for sample in samples]
        rows.append(
            [
                NAMES[name],
                f"{target_median(samples, name):,.0f}",
                f"{min(rates):,.0f} to {max(rates):,.0f}",
                f"{target_median(samples, name) / queue:.2f}x",
                f"{min(ratios):.2f} to {max(ratios):.2f}x",
                *(_cpu_cells(samples, name) if measured else ()),
            ]
        )
    in_grid = len(samples) - len(data["target_repeats"])
    return [
        "",
        f"**The targets' configuration, {len(samples)} "
        f"alternation{'s' if len(samples) > 1 else ''}** ({processes} claimers, batch {batch}"
        f"{'; the row above is the first' if in_grid else ''}: each runs the drains "
        "back to back, in rotating order; the targets read these medians"
        + (
            ". *CPU µs/row*: the medians of the CPU one row cost the claimer processes "
            "(client) and their server backends (server), measured in `/proc`; on 2 cores a "
            "drain cannot beat 2,000,000 ÷ (client + server) rows/s"
            if measured
            else ""
        )
        + "):",
        "",
        *table(
            ["drain", "median rows/s", "range", "median ÷ (c)", "per alternation ÷ (c)"]
            + (["client CPU µs/row", "server CPU µs/row", "CPU µs/row"] if measured else []),
            rows,
        ),
    ]


def _cpu_cells(samples: list[dict[str, Any]], name: str) -> list[str]:
    """One drain's median client, server and total CPU per row over the alternations."""
    client = statistics.median(sample[name]["client_us_per_row"] for sample in samples)
    server = statistics.median(sample[name]["server_us_per_row"] for sample in samples)
    total = statistics.median(
        sample[name]["client_us_per_row"] + sample[name]["server_us_per_row"] for sample in samples
    )
    return [f"{client:.1f}", f"{server:.1f}", f"{total:.1f}"]


def _hand_rows(lat: dict[str, Any]) -> list[list[str]]:
    """The hand-written pair measured in the same rounds (absent from older data)."""
    from bench.report_format import ratio

    if "sql_claim" not in lat:
        return []
    claim, update = lat["sql_claim"], lat["sql_update"]
    return [
        [
            "hand-written claim, limit 1 (partial index)",
            f"{claim['p50_ms']:.3f}",
            f"{claim['p99_ms']:.3f}",
            ratio(claim["p50_ms"], update["p50_ms"]),
            "hand-written update",
        ],
        [
            "hand-written guarded update",
            f"{update['p50_ms']:.3f}",
            f"{update['p99_ms']:.3f}",
            "1.00x",
            "",
        ],
    ]


def _sqlite_table(data: dict[str, Any]) -> list[str]:
    from bench.report_format import ratio, table

    sq = data["sqlite"]
    hand = sqlite_rate(data, "sql")
    labels = {
        "recipe": "store, recipe (first claim declares the set)",
        "declared": "store, declared set",
        "sql": "sqlite3, hand-made partial index (`INDEXED BY`), JSON text",
        "sql-decoded": "the same, values decoded (`json.loads` per row)",
        "grown": "store, recipe, history grown under it (set declared on the new queue)",
    }
    variants = [v for v in aged_sqlite.VARIANTS if v in sq["drains"]]
    timed_cpu = all("cpu_rate" in d for v in variants for d in sq["drains"][v])
    cpu_hand = sqlite_rate(data, "sql", "cpu_rate") if timed_cpu else 0.0
    return [
        f"**SQLite, one process**, {sq['pending']:,} pending over {sq['history']:,} done rows, "
        f"batch {sq['batch']}, mean of {len(sq['drains']['sql'])} drain(s) per variant "
        "(order rotating):",
        "",
        *table(
            ["drain", "rows/s", "first claim ms", "÷ hand-written"]
            + (["rows per CPU second", "CPU ÷ hand-written"] if timed_cpu else []),
            [
                [
                    labels[v],
                    f"{sqlite_rate(data, v):,.0f}",
                    f"{max(d['first_ms'] for d in sq['drains'][v]):.0f}",
                    ratio(sqlite_rate(data, v), hand),
                ]
                + (
                    [
                        f"{sqlite_rate(data, v, 'cpu_rate'):,.0f}",
                        ratio(sqlite_rate(data, v, "cpu_rate"), cpu_hand),
                    ]
                    if timed_cpu
                    else []
                )
                for v in variants
            ],
        ),
    ]
