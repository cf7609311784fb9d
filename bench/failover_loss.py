"""What an asynchronous standby loses in a failover: ``python -m bench.failover_loss``.

With an asynchronous standby the primary acknowledges a commit before the standby
has it. A crash of the primary then loses the commits the standby had not received:
acknowledged writes, and the idempotency receipts written with them. This counts
them: per run, a primary and its asynchronous standby on loopback
(devkit/standby.py; the stream through a relay adding ``--rtt-ms`` of round trip),
4 processes doing keyed increments (each marks its key in the same statement),
the primary stopped ``-m immediate`` a random 0.2-0.8 s into the stream
(``partition``: the replication link cut at that moment too, so what was in flight
never arrives) and the standby promoted. An acknowledged increment whose mark is missing on the new primary was
lost; each lost one is then retried with its idempotency key, which must apply it
exactly once (``replayed`` false, then true), as an Airflow task's retry would.
Not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from airflow_atomic_store import AtomicStore, StoreUnavailableError
from bench.timing import progress
from devkit.processes import run_in_processes
from devkit.standby import StandbyPair

WORKERS = 4
#: ``crash``: the primary crashes, what it had sent still reaches the standby;
#: ``partition``: the replication link is cut first, and what was in flight is lost.
MODELS = ("crash", "partition")


def _increment(store: AtomicStore, worker: int, key: str) -> dict[str, Any]:
    return store.atomic_update(
        "counters",
        f"w{worker}",
        mutations=[
            {"field": "n", "operation": "increment", "value": 1},
            {"field": f"seen.{key}", "operation": "set", "value": True},
        ],
        idempotency_key=key,
    )


def increment_until_crash(barrier: Any, url: str, worker: int, stop_file: str) -> list[str]:
    """Keyed increments until the store fails (or ``stop_file``); return the acknowledged keys."""
    acknowledged: list[str] = []
    with AtomicStore(url) as store:
        store.put("counters", f"w{worker}", {"n": 0, "seen": {}})
        barrier.wait(timeout=60)
        n = 0
        while not os.path.exists(stop_file):
            key = f"w{worker}-{n}"
            try:
                _increment(store, worker, key)
            except StoreUnavailableError:
                return acknowledged
            acknowledged.append(key)
            n += 1
            time.sleep(0.001)
    return acknowledged


def _wait_for_stream(url: str, timeout: float = 60.0) -> None:
    """Wait until every worker has made 10 increments."""
    deadline = time.monotonic() + timeout
    with AtomicStore(url) as store:
        while time.monotonic() < deadline:
            rows = [store.get("counters", f"w{worker}") for worker in range(WORKERS)]
            if all(row is not None and row["n"] >= 10 for row in rows):
                return
            time.sleep(0.02)
    raise RuntimeError(f"the workers did not start within {timeout:.0f}s")


def one_run(rtt_ms: float, model: str, seed: int, workdir: Path) -> dict[str, int]:
    stop_file = workdir / f"stop-{rtt_ms:g}-{model}-{seed}"
    with StandbyPair(synchronous=False, replication_delay=rtt_ms / 2000) as pair:
        url = pair.primary.url  # the crash ends each worker's stream
        pause = random.Random(seed).uniform(0.2, 0.8)

        def crash() -> None:
            try:
                _wait_for_stream(url)
                time.sleep(pause)
                if model == "partition" and pair.replication is not None:
                    pair.replication.cut()  # what was on its way to the standby is lost
                pair.fail_over()
            finally:
                stop_file.touch()

        crasher = threading.Thread(target=crash, daemon=True)
        crasher.start()
        acknowledged = run_in_processes(
            increment_until_crash, [(url, w, str(stop_file)) for w in range(WORKERS)], timeout=120
        )
        crasher.join(timeout=60)
        lost = retried_once = 0
        with AtomicStore(pair.standby.url) as store:
            for worker, keys in enumerate(acknowledged):
                row = store.get("counters", f"w{worker}") or {"n": 0, "seen": {}}
                missing = [key for key in keys if key not in row["seen"]]
                lost += len(missing)
                for key in missing:
                    first, again = _increment(store, worker, key), _increment(store, worker, key)
                    retried_once += not first["replayed"] and again["replayed"]
                after = store.get("counters", f"w{worker}")
                assert after is not None and after["n"] == len(after["seen"]), "doubled"
        return {
            "acknowledged": sum(len(keys) for keys in acknowledged),
            "lost": lost,
            "retried_once": retried_once,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover_loss", description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rtt-ms", type=float, nargs="+", default=[0.0, 2.0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    options = parser.parse_args(argv)
    print(
        "| added round trip | failure | runs | acknowledged | lost | runs with a loss "
        "| lost ones a retry applied once |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as workdir:
        for rtt in options.rtt_ms:
            for model in options.models:
                runs = []
                for seed in range(options.runs):
                    progress(f"rtt {rtt} ms, {model}, run {seed + 1}/{options.runs}")
                    runs.append(one_run(rtt, model, seed, Path(workdir)))
                acknowledged = sum(r["acknowledged"] for r in runs)
                lost = sum(r["lost"] for r in runs)
                with_loss = sum(1 for r in runs if r["lost"])
                once = sum(r["retried_once"] for r in runs)
                print(
                    f"| {rtt:g} ms | {model} | {len(runs)} | {acknowledged} | {lost} "
                    f"| {with_loss} | {once} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
