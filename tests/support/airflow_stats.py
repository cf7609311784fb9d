"""Receive what Airflow's ``Stats`` sends, in-process, on every Airflow 3 line.

A deployment's task runner points ``Stats`` at the configured backend (StatsD,
OpenTelemetry...) when a task process starts; ``dag.test()`` runs tasks without
that start-up, so a test installs its backend itself, the way each line lets the
task runner do it. The recorder is a complete stats logger (counters, gauges,
timings, timers): Airflow's own task code sends its metrics to it as well.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sent:
    kind: str  # incr, decr, gauge, timing
    name: str
    value: float
    tags: dict[str, Any] | None


@dataclass
class RecordingStatsLogger:
    sent: list[Sent] = field(default_factory=list)

    def incr(self, stat: str, count: float = 1, rate: float = 1, *, tags: Any = None) -> None:
        self.sent.append(Sent("incr", stat, count, tags))

    def decr(self, stat: str, count: float = 1, rate: float = 1, *, tags: Any = None) -> None:
        self.sent.append(Sent("decr", stat, count, tags))

    def gauge(
        self, stat: str, value: float, rate: float = 1, delta: bool = False, *, tags: Any = None
    ) -> None:
        self.sent.append(Sent("gauge", stat, value, tags))

    def timing(self, stat: str, dt: Any, *, tags: Any = None) -> None:
        value = dt.total_seconds() * 1000.0 if hasattr(dt, "total_seconds") else float(dt)
        self.sent.append(Sent("timing", stat, value, tags))

    def timer(self, stat: str | None = None, *args: Any, tags: Any = None, **kwargs: Any) -> Any:
        return _Timer(self, stat, tags)

    def named(self, prefix: str) -> list[Sent]:
        return [s for s in self.sent if s.name.startswith(prefix)]


@dataclass
class _Timer:
    logger: RecordingStatsLogger
    stat: str | None
    tags: Any
    duration: float | None = None
    _started: float = 0.0

    def __enter__(self) -> _Timer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> _Timer:
        self._started = time.perf_counter()
        return self

    def stop(self, send: bool = True) -> None:
        self.duration = (time.perf_counter() - self._started) * 1000.0
        if send and self.stat:
            self.logger.timing(self.stat, self.duration, tags=self.tags)


@contextmanager
def recorded_stats() -> Iterator[RecordingStatsLogger]:
    """Point Airflow's ``Stats`` at a recorder for the duration of the block."""
    recorder = RecordingStatsLogger()
    installer = next(install for probe, install in _INSTALLERS if probe())
    restore = installer(recorder)
    try:
        yield recorder
    finally:
        restore()


def _module_functions() -> bool:  # 3.3: module-level initialize(factory=, export_legacy_names=)
    try:
        from airflow.sdk.observability import stats
    except ImportError:
        return False
    return hasattr(stats, "initialize") and not hasattr(stats.Stats, "instance")


def _install_module_functions(recorder: RecordingStatsLogger) -> Any:
    from airflow.sdk.observability import stats

    home = sys.modules[stats.initialize.__module__]  # where the state lives
    factory, legacy = home._factory, home._export_legacy_names
    stats.initialize(factory=lambda: recorder, export_legacy_names=False)

    def restore() -> None:
        if factory is None:  # never initialised: back to "no backend yet"
            home._factory, home._backend = None, None
        else:
            stats.initialize(factory=factory, export_legacy_names=legacy)

    return restore


def _sdk_metaclass() -> bool:  # 3.2: airflow.sdk.observability.stats.Stats.initialize(factory=)
    try:
        from airflow.sdk.observability.stats import Stats
    except ImportError:
        return False
    return hasattr(Stats, "initialize")


def _install_sdk_metaclass(recorder: RecordingStatsLogger) -> Any:
    from airflow.sdk.observability.stats import Stats

    factory = getattr(Stats, "factory", None)
    Stats.initialize(factory=lambda: recorder)
    return lambda: Stats.initialize(factory=factory)


def _core_metaclass() -> bool:  # 3.0, 3.1: airflow.stats.Stats, instance made on first use
    return True


def _install_core_metaclass(recorder: RecordingStatsLogger) -> Any:
    from airflow.stats import Stats

    previous = Stats.__dict__.get("instance")
    Stats.instance = recorder

    def restore() -> None:
        Stats.instance = previous

    return restore


_INSTALLERS = (
    (_module_functions, _install_module_functions),
    (_sdk_metaclass, _install_sdk_metaclass),
    (_core_metaclass, _install_core_metaclass),
)
