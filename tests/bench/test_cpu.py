"""The drains' CPU accounting (``bench/cpu.py``): pure parts, and this process's own CPU."""

from __future__ import annotations

import os
import time

import pytest

from bench import cpu


def test_a_tag_is_added_to_a_url_with_or_without_a_query() -> None:
    assert (
        cpu.tagged_url("postgresql://u@h:1/db", "t") == "postgresql://u@h:1/db?application_name=t"
    )
    assert (
        cpu.tagged_url("postgresql://u@h:1/db?sslmode=disable", "t")
        == "postgresql://u@h:1/db?sslmode=disable&application_name=t"
    )


def test_cpu_per_row_is_left_out_unless_every_process_measured_its_server() -> None:
    both = [{"client_cpu": 0.2, "server_cpu": 0.3}, {"client_cpu": 0.1, "server_cpu": 0.1}]
    assert cpu.per_row(both, 100_000) == {
        "client_us_per_row": pytest.approx(3.0),
        "server_us_per_row": pytest.approx(4.0),
    }
    assert cpu.per_row([*both, {"client_cpu": 0.1, "server_cpu": None}], 100_000) == {}
    assert cpu.per_row(both, 0) == {}


def test_a_meter_reads_the_cpu_a_watched_process_spends() -> None:
    meter = cpu.CpuMeter([os.getpid()])  # this process stands in for a backend
    meter.start()
    sum(range(3_000_000))
    time.sleep(0.01)  # switched out: the scheduler's count takes in the work (as a backend's)
    spent = meter.stop()
    assert spent["client_cpu"] > 0
    assert spent["server_cpu"] is not None and spent["server_cpu"] > 0


def test_a_meter_with_no_backend_reports_no_server_cpu() -> None:
    meter = cpu.CpuMeter([])
    meter.start()
    assert meter.stop()["server_cpu"] is None
