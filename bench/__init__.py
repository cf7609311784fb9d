"""Benchmarks: the store against hand-written SQL and real queue libraries, in one run.

Absolute numbers on a shared 2-core machine say little, so every scenario runs
the store *and* its baseline side by side, interleaved, on the same server,
and the report prints each figure beside its baseline or as a ratio.

    python -m bench              # every scenario at full size, writes docs/benchmarks.md
    python -m bench --quick      # every scenario at small size (< 1 minute)
    python -m bench claim scale  # only these scenarios

See ``bench/cli.py`` for the options and ``bench/scenarios/`` for what each
scenario measures and why.
"""
