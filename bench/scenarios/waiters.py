"""Issue 40: how many deferred waits one triggerer process holds, and what they cost.

N waits run in one asyncio loop as Airflow's TriggerRunner runs them: each
trigger built as its operator builds it (``wait_trigger`` → ``serialize()`` →
re-created from the kwargs), each ``run()`` in its own task. Two kinds:

- **update**: N deferred guarded updates, each on a row of its own
  (``free equals true``), woken by N writes (another OS process releases the rows
  one by one with ``atomic_update``);
- **claim**: N deferred claims on one filter (``status equals pending``), woken by
  one write (another process puts one pending row).

On a PostgreSQL server started with ``max_connections=100`` (the default; the
store signs in as a plain role, which may use 97 of them) and on SQLite. Per N:
the connections the store's role holds while all wait, whether another client of
that role can connect then, the server's commits per second while they idle
(``pg_stat_database.xact_commit`` over ``IDLE_SECONDS``), each waiter's wake
delay from the commit of the write that satisfied it to its event (p50, p99,
max), events that came before their write began (must be none), the loop's
longest stall after start-up (a 10 ms heartbeat in the same loop), and the
writer's time for its writes against the same writes with nobody waiting, run
three times just before and three times just after (medians; the same process tree).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import aclosing
from datetime import timedelta
from multiprocessing import get_context
from typing import Any

from bench.environment import BenchEnvironment
from bench.sizes import Sizes
from bench.timing import percentile, progress

TITLE = "Waiting at scale"

#: Waiters per run, by the run's size mode.
COUNTS = {"full": (10, 100, 1000), "quick": (10, 100), "tiny": (10,)}
#: Seconds all wait before the writes, the server's commits counted meanwhile. A
#: backend flushes its statistics at most every second (idle: every 10 s), so the
#: window is long enough for the counter to be read in a steady state.
IDLE_SECONDS = {"full": 12.0, "quick": 6.0, "tiny": 2.0}
#: Seconds every waiter has to wake once the writes are done.
WAKE_LIMIT = 60.0
POLL_INTERVAL = 2.0  # the operators' default
#: The same writes with nobody waiting, this many times just before and just after.
BASELINES = 3
FREE = [{"field": "free", "operator": "equals", "value": True}]
TAKEN = [{"field": "free", "operator": "equals", "value": False}]
PENDING = [{"field": "status", "operator": "equals", "value": "pending"}]
ROLE = "waiter"
_CONN_ID = "atomic_store_bench_waiters"


# -- the writer: another OS process ------------------------------------------------------


def write(url: str, kind: str, count: int, tag: str) -> list[tuple[float, float]]:
    """The writes that wake the waiters; ``(began, committed)`` wall-clock times of each."""
    from airflow_atomic_store import AtomicStore

    times = []
    with AtomicStore(url) as store:
        store.get("slots", "warm-up")  # connected before the clock starts
        if kind == "claim":
            began = time.time()
            store.put("claims", f"job-{tag}", {"status": "pending"})
            times.append((began, time.time()))
            return times
        for n in range(count):
            began = time.time()
            store.atomic_update(
                "slots",
                f"slot-{n}",
                where=TAKEN,
                mutations=[{"field": "free", "operation": "set", "value": True}],
            )
            times.append((began, time.time()))
    return times


def _reset(url: str, kind: str, count: int) -> None:
    """Every slot taken again; no pending row to claim."""
    from airflow_atomic_store import AtomicStore

    with AtomicStore(url) as store:
        if kind == "update":
            for n in range(count):
                store.put("slots", f"slot-{n}", {"free": False})
        else:
            store.atomic_claim("claims", where=PENDING, mode="delete", limit=1000)
            store.put("claims", "done-0", {"status": "done"})


# -- the waiters: one loop, as the triggerer runs them ------------------------------------


def _triggers(kind: str, count: int) -> list[Any]:
    """Built by the operators, serialized, and re-created from the kwargs."""
    from airflow_atomic_store import timestamps
    from airflow_atomic_store.operators import AtomicClaimOperator, AtomicUpdateOperator

    deadline = timestamps.shifted(timedelta(hours=1))
    built = []
    for n in range(count):
        operator: Any
        if kind == "update":
            operator = AtomicUpdateOperator(
                task_id=f"update_{n}",
                conn_id=_CONN_ID,
                table="slots",
                key=f"slot-{n}",
                where=FREE,
                mutations=[{"field": "free", "operation": "set", "value": False}],
                deferrable=True,
                poll_interval=POLL_INTERVAL,
            )
        else:
            operator = AtomicClaimOperator(
                task_id=f"claim_{n}",
                conn_id=_CONN_ID,
                table="claims",
                where=PENDING,
                deferrable=True,
                poll_interval=POLL_INTERVAL,
            )
        trigger = operator.wait_trigger(deadline=deadline, rerender_at=None)
        classpath, kwargs = trigger.serialize()
        module, name = classpath.rsplit(".", 1)
        built.append(getattr(importlib.import_module(module), name)(**kwargs))
    return built


class ServerCpu:
    """The server's processes' CPU, and which of them are the waiters' (the role's)."""

    def __init__(self, data_dir: Any, admin_url: str) -> None:
        self.data_dir, self.admin_url = data_dir, admin_url

    def cpu(self) -> dict[int, float]:
        return server_cpu(self.data_dir)

    def pids(self) -> set[int]:
        return _role_pids(self.admin_url)


class Heartbeat:
    """A 10 ms sleep in the waiters' loop: its longest gap is the loop's longest stall.

    Each gap's CPU time (the loop thread's) is kept with it: on a machine other
    work loads, a long gap with little CPU in it is the process waiting for a core,
    not the loop blocked by the code.
    """

    def __init__(self) -> None:
        self.longest = 0.0
        self.longest_cpu = 0.0  # the loop thread's CPU time within the longest gap
        self.busiest = 0.0  # the most CPU time within one gap
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._beat())

    async def _beat(self) -> None:
        last, last_cpu = time.perf_counter(), time.thread_time()
        while True:
            await asyncio.sleep(0.01)
            now, cpu = time.perf_counter(), time.thread_time()
            gap, used = now - last - 0.01, cpu - last_cpu
            if gap > self.longest:
                self.longest, self.longest_cpu = gap, used
            self.busiest = max(self.busiest, used)
            last, last_cpu = now, cpu

    def reset(self) -> None:
        self.longest = self.longest_cpu = self.busiest = 0.0

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def _run_waiters(
    url: str,
    backend: str,
    kind: str,
    count: int,
    pool: ProcessPoolExecutor,
    watch: Callable[[], dict[str, Any]],
    idle_seconds: float,
    tag: str,
    server: ServerCpu | None,
) -> dict[str, Any]:
    from airflow_atomic_store.triggers import hub

    loop = asyncio.get_running_loop()
    triggers = _triggers(kind, count)
    woken: dict[int, float] = {}
    beat = Heartbeat()
    beat.start()

    async def run(n: int, trigger: Any) -> None:  # TriggerRunner: one task per trigger
        async with aclosing(trigger.run()) as events:
            async for _ in events:
                woken[n] = time.time()
                return

    started = time.perf_counter()
    tasks = [asyncio.ensure_future(run(n, t)) for n, t in enumerate(triggers)]
    await _until(lambda: _all_waiting(hub.open_hubs(), count), 120)
    startup = time.perf_counter() - started
    startup_stall = beat.longest
    beat.reset()
    reads_before = _reads(hub.open_hubs())
    idle = await asyncio.to_thread(watch)  # connections, another client, commits/s
    reads = _reads(hub.open_hubs()) - reads_before
    early = len(woken)
    ours = await asyncio.to_thread(server.pids) if server else set()  # listener and reader
    server_before = await asyncio.to_thread(server.cpu) if server else {}
    cpu = time.process_time()
    times = await loop.run_in_executor(pool, write, url, kind, count, tag)
    writer_seconds = times[-1][1] - times[0][0]
    await asyncio.wait(tasks, timeout=WAKE_LIMIT)
    cpu = time.process_time() - cpu
    server_after = await asyncio.to_thread(server.cpu) if server else {}
    stall, stall_cpu, busiest = beat.longest, beat.longest_cpu, beat.busiest
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await beat.stop()
    delays, before_write = [], 0
    for n, at in woken.items():
        began, committed = times[n if kind == "update" else 0]
        delays.append(at - committed)
        before_write += at < began
    return {
        "backend": backend,
        "kind": kind,
        "n": count,
        "startup_s": startup,
        "startup_stall_ms": startup_stall * 1000,
        **idle,
        "shared_reads_per_s": reads / idle["idle_s"],
        "woken": len(woken),
        "woken_while_idle": early,
        "before_their_write": before_write,
        "p50_ms": percentile(delays, 50) * 1000 if delays else None,
        "p99_ms": percentile(delays, 99) * 1000 if delays else None,
        "max_ms": max(delays) * 1000 if delays else None,
        "stall_ms": stall * 1000,
        "stall_cpu_ms": stall_cpu * 1000,
        "busiest_gap_cpu_ms": busiest * 1000,
        "writer_s": writer_seconds,
        "waking_cpu_s": cpu,  # the waiters' process, from the first write to the last event
        # the server's CPU meanwhile: the waiters' two backends, and all of it
        "server_cpu_waiters_s": _spent(server_before, server_after, ours) if server else None,
        "server_cpu_all_s": _spent(server_before, server_after, None) if server else None,
    }


def _all_waiting(hubs: list[Any], count: int) -> bool:
    """Every waiter joined its probe, and each probe answered once."""
    probes = [probe for hub in hubs for probe in hub.probes]
    joined = sum(probe.waiters for probe in probes)
    return joined == count and all(probe.answered for probe in probes)


def _reads(hubs: list[Any]) -> int:
    return sum(probe.reads for hub in hubs for probe in hub.probes)


async def _until(done: Callable[[], bool], limit: float) -> None:
    deadline = time.monotonic() + limit
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError("the waiters did not all start waiting in time")
        await asyncio.sleep(0.05)


# -- PostgreSQL's side: connections, another client, idle commits -----------------------


def _postgres_watch(admin_url: str, role_url: str, idle_seconds: float) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:

        def commits() -> int:
            row = admin.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
            assert row is not None
            return int(row[0])

        def held() -> int:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (ROLE,)
            ).fetchone()
            assert row is not None
            return int(row[0])

        connections = held()
        try:
            with psycopg.connect(role_url, connect_timeout=5) as other:
                other.execute("SELECT 1")
            another = "yes"
        except psycopg.Error as exc:
            another = f"refused ({str(exc).strip().splitlines()[0][:60]})"
        first = commits()
        started = time.monotonic()
        time.sleep(idle_seconds)
        admin.execute("SELECT pg_stat_force_next_flush()")
        elapsed = time.monotonic() - started
        # The admin's own statements: its three reads commit too.
        per_second = max(0, commits() - first - 3) / elapsed
    return {
        "connections": connections,
        "another_client": another,
        "idle_commits_per_s": per_second,
        "idle_s": elapsed,
    }


def _sqlite_watch(idle_seconds: float) -> dict[str, Any]:
    started = time.monotonic()
    time.sleep(idle_seconds)
    return {
        "connections": None,
        "another_client": "yes",
        "idle_commits_per_s": None,
        "idle_s": time.monotonic() - started,
    }


# -- where the CPU goes: the server's processes, read from /proc ---------------------------


def server_cpu(data_dir: Any) -> dict[int, float]:
    """CPU seconds so far of each live process of the server (the postmaster's children),
    and under 0 the postmaster's own with its reaped children's (a backend that exited,
    as a writer's does when it disconnects): their sum grows by what the server spent."""
    from pathlib import Path

    try:
        postmaster = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError):
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        if pid == postmaster:  # utime, stime, cutime, cstime
            seconds[0] = sum(int(f) for f in fields[11:15]) / tick
        elif int(fields[1]) == postmaster:  # ppid
            seconds[pid] = (int(fields[11]) + int(fields[12])) / tick
    return seconds


def _role_pids(admin_url: str) -> set[int]:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE usename = %s", (ROLE,)
        ).fetchall()
    return {int(row[0]) for row in rows}


def _spent(before: dict[int, float], after: dict[int, float], pids: set[int] | None) -> float:
    """CPU seconds spent between the snapshots by ``pids`` (None: by the whole server)."""
    if pids is None:
        return sum(after.values()) - sum(before.values())
    return sum(after[pid] - before.get(pid, 0.0) for pid in after if pid in pids)


# -- the runs ------------------------------------------------------------------------------


def _baseline(
    pool: ProcessPoolExecutor,
    url: str,
    kind: str,
    count: int,
    tag: str,
    server: ServerCpu | None = None,
) -> tuple[float, float | None]:
    """The writes with nobody waiting: their time, and the server's CPU meanwhile."""
    _reset(url, kind, count)
    before = server.cpu() if server else {}
    times = pool.submit(write, url, kind, count, tag).result()
    after = server.cpu() if server else {}
    return times[-1][1] - times[0][0], _spent(before, after, None) if server else None


def _measure(
    url: str,
    backend: str,
    kind: str,
    count: int,
    pool: ProcessPoolExecutor,
    watch: Callable[[], dict[str, Any]],
    idle_seconds: float,
    server: ServerCpu | None,
) -> dict[str, Any]:
    os.environ[f"AIRFLOW_CONN_{_CONN_ID.upper()}"] = url
    tag = f"{backend}-{count}"
    before = [
        _baseline(pool, url, kind, count, f"{tag}-before-{n}", server) for n in range(BASELINES)
    ]
    _reset(url, kind, count)
    result = asyncio.run(
        _run_waiters(
            url, backend, kind, count, pool, watch, idle_seconds, f"{backend}-{count}", server
        )
    )
    after = [
        _baseline(pool, url, kind, count, f"{tag}-after-{n}", server) for n in range(BASELINES)
    ]
    seconds = [s for s, _ in before], [s for s, _ in after]
    result["nobody_waiting_s"] = [statistics.median(seconds[0]), statistics.median(seconds[1])]
    result["writer_ratio"] = result["writer_s"] / statistics.median([*seconds[0], *seconds[1]])
    alone = [cpu for _, cpu in [*before, *after] if cpu is not None]
    result["server_cpu_nobody_waiting_s"] = statistics.median(alone) if alone else None
    progress(
        f"waiters {backend} {kind} N={count}: woke {result['woken']}/{count}, "
        f"p50 {_ms(result['p50_ms'])} ms, p99 {_ms(result['p99_ms'])} ms, "
        f"connections {result['connections']}, stall {result['stall_ms']:.0f} ms "
        f"(CPU {result['stall_cpu_ms']:.0f} ms, busiest {result['busiest_gap_cpu_ms']:.0f} ms), "
        f"writer x{result['writer_ratio']:.2f}, waking CPU {result['waking_cpu_s']:.2f} s, "
        f"server CPU {_seconds(result['server_cpu_all_s'])} (waiters' backends "
        f"{_seconds(result['server_cpu_waiters_s'])}), nobody waiting "
        f"{_seconds(result['server_cpu_nobody_waiting_s'])}"
    )
    return result


def run(env: BenchEnvironment, sizes: Sizes, *, require_extras: bool) -> dict[str, Any]:
    from devkit.postgres_server import PostgresServer

    counts = COUNTS.get(sizes.mode, COUNTS["full"])
    idle_seconds = IDLE_SECONDS.get(sizes.mode, IDLE_SECONDS["full"])
    load = os.getloadavg()
    rows: list[dict[str, Any]] = []
    context = get_context("spawn")
    with (
        PostgresServer(dbname="waiters", max_connections=100) as server,
        ProcessPoolExecutor(1, mp_context=context) as pool,
    ):
        server.execute(f"CREATE ROLE {ROLE} LOGIN", dbname="waiters")
        server.execute(f"GRANT ALL ON SCHEMA public TO {ROLE}", dbname="waiters")
        server.execute(f"ALTER DATABASE waiters OWNER TO {ROLE}")
        role_url = server.url.replace("postgres@", f"{ROLE}@", 1)
        pool.submit(time.sleep, 0).result()  # the writer process started
        cpu = ServerCpu(server.data_dir, server.url)
        backends: list[tuple[str, str, Callable[[], dict[str, Any]], ServerCpu | None]] = [
            (
                "postgres",
                role_url,
                lambda: _postgres_watch(server.url, role_url, idle_seconds),
                cpu,
            ),
            ("sqlite", env.sqlite_url("waiters"), lambda: _sqlite_watch(idle_seconds), None),
        ]
        for backend, url, watch, on in backends:
            for kind in ("update", "claim"):
                _baseline(pool, url, kind, max(counts), f"{backend}-warm-up")  # first writes
                for count in counts:
                    rows.append(_measure(url, backend, kind, count, pool, watch, idle_seconds, on))
    return {
        "rows": rows,
        "poll_interval": POLL_INTERVAL,
        "load_at_start": [round(x, 2) for x in load],
        "load_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def section(data: dict[str, Any]) -> str:
    lines = [
        f"N deferred waits in one event loop, as the triggerer runs them (operators' "
        f"`poll_interval` {data['poll_interval']:g} s); PostgreSQL with `max_connections=100`. "
        f"Load average at start {data['load_at_start']}, at end {data['load_at_end']} "
        "(other work shared the machine).",
        "",
        "| backend | waits | N | connections | another client | idle commits/s | shared reads/s "
        "| woken | before its write | p50 / p99 / max (ms) | longest stall after start-up "
        "(its CPU) | writer: with waits / nobody waiting (medians before, after) "
        "| CPU while waking: waiters' process, their backends | server CPU for the writes: "
        "with waits / nobody waiting |",
        "|---|---|---:|---:|---|---:|---:|---|---:|---|---:|---|---|---|",
    ]
    for row in data["rows"]:
        commits = row["idle_commits_per_s"]
        before, after = row["nobody_waiting_s"]
        lines.append(
            f"| {row['backend']} | {'update, own row' if row['kind'] == 'update' else 'claim, one filter'} "
            f"| {row['n']:,} | {'—' if row['connections'] is None else row['connections']} "
            f"| {row['another_client']} | {'—' if commits is None else f'{commits:.1f}'} "
            f"| {row['shared_reads_per_s']:.1f} | {row['woken']:,}/{row['n']:,} "
            f"| {row['before_their_write']} "
            f"| {_ms(row['p50_ms'])} / {_ms(row['p99_ms'])} / {_ms(row['max_ms'])} "
            f"| {row['stall_ms']:.0f} ms ({row['stall_cpu_ms']:.0f} ms) "
            f"| {row['writer_s']:.2f} s / {before:.2f}, {after:.2f} s ({row['writer_ratio']:.2f}x) "
            f"| {_seconds(row['waking_cpu_s'])}, {_seconds(row.get('server_cpu_waiters_s'))} "
            f"| {_seconds(row.get('server_cpu_all_s'))} / "
            f"{_seconds(row.get('server_cpu_nobody_waiting_s'))} |"
        )
    return "\n".join(lines) + "\n"
