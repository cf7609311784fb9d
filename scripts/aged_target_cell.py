"""The aged-queue targets' cell at full size, alone: 20,000 pending over 200,000 done rows,
4 claimers, claims of 10; the recipe, declared and pgmq-shaped drains in rotating order,
``turns`` times, on one server (issue 41's targets: recipe and declared >= 1.0x pgmq).

    python scripts/aged_target_cell.py 9

Run from a checkout (its ``bench`` and package are imported); alternating two checkouts,
one turn each, compares them:
``for tree in before after ...; do (cd $tree && PYTHONPATH=. python .../aged_target_cell.py 1); done``.
"""

from __future__ import annotations

import json
import statistics
import sys

from bench import loading
from bench.environment import BenchEnvironment
from bench.scenarios import aged_queue
from bench.sizes import FULL


def main() -> None:
    with BenchEnvironment() as env:
        url = env.postgres_url()
        loading.create_schema(url)
        rows = []
        for turn in range(int(sys.argv[1])):
            entry = aged_queue.configuration(
                url,
                env.postgres_url("readdelete"),
                FULL,
                4,
                10,
                turn,
                ("recipe", "declared", "pgmq"),
            )
            rows.append({k: entry[k]["rate"] for k in ("recipe", "declared", "pgmq")})
            print(json.dumps(rows[-1]), flush=True)
        for name in ("recipe", "declared"):
            ratios = [r[name] / r["pgmq"] for r in rows]
            turns = " ".join(f"{x:.2f}" for x in ratios)
            print(f"{name} ÷ pgmq per turn {turns}, median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
