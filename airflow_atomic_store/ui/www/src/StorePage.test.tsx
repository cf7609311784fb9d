import { cleanup, fireEvent, render, screen, waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";

import { largest, StorePage, staleByRun, TABLE_LIMIT } from "./StorePage";
import { serve, type Routes } from "./testing";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const points = (count: number, seconds: number) =>
  Array.from({ length: count }, (_, n) => ({
    start: new Date(Date.UTC(2026, 11, 7, 0, 0, 0) + n * seconds * 1000).toISOString(),
    finished: n % 3,
    backlog: 40 - Math.floor(n / 3),
  }));

const STATS = {
  table: "jobs",
  rows: 42,
  status_counts: { done: 30, in_flight: 2, pending: 10 },
  oldest_pending_age_seconds: 125,
  in_flight_count: 2,
  in_flight: [
    { key: "job-1", claimed_by: "queue_dispatcher/run-1", claimed_at: "2026-12-07T00:00:00.000000Z", claim_age_seconds: 900, stale: true },
    { key: "job-2", claimed_by: "queue_dispatcher/run-2", claimed_at: "2026-12-07T00:14:00.000000Z", claim_age_seconds: 60, stale: false },
  ],
  stale_after_seconds: 600,
  stale_count: 1,
  stale: [
    { key: "job-1", claimed_by: "queue_dispatcher/run-1", claimed_at: "2026-12-07T00:00:00.000000Z", claim_age_seconds: 900, stale: true },
  ],
  activity: {
    "activity-hour": { table: "jobs", bucket_seconds: 60, points: points(60, 60) },
    "activity-day": { table: "jobs", bucket_seconds: 900, points: points(96, 900) },
  },
};

const ROUTES: Routes = {
  connections: () => ({
    body: { connections: [{ conn_id: "atomic_store_default", conn_type: "postgres", location: "db:5432/store", source: "environment" }] },
  }),
  tables: () => ({ body: { connection: "atomic_store_default", tables: [{ table: "jobs", rows: 42 }] } }),
  stats: () => ({ body: STATS }),
  rows: (url) =>
    url.searchParams.get("where")
      ? { status: 400, body: { error: "where[0].operator: unknown operator 'resembles'" } }
      : {
          body: {
            table: "jobs",
            rows: [{ key: "lease", value: { holder: "a/b" }, created_at: "2026-12-07T00:00:00.000000Z", updated_at: "2026-12-07T00:00:00.000000Z", shape: "lease", lease_state: "held", tokens: null }],
            limit: 50,
            offset: 0,
            has_more: false,
          },
        },
};

async function openQueue(): Promise<URL[]> {
  const requested = serve(ROUTES);
  render(<StorePage />);
  fireEvent.click(await screen.findByText("atomic_store_default"));
  fireEvent.click(await screen.findByText("jobs"));
  await screen.findByText("Last hour, per minute", { exact: false });
  return requested;
}

describe("StorePage", () => {
  it("lists the connections, then a connection's tables, then a table's counts by status", async () => {
    await openQueue();
    expect(document.getElementById("rows")?.textContent).toBe("42");
    expect(document.getElementById("pending-count")?.textContent).toBe("10");
    expect(document.getElementById("in-flight-count")?.textContent).toBe("2");
    expect(document.getElementById("oldest-pending")?.textContent).toBe("2 min 5 s");
    const counted = [...document.querySelectorAll("#status-counts tr[data-status]")].map((row) => row.getAttribute("data-status"));
    expect(counted).toEqual(["done", "in_flight", "pending"]);
  });

  it("draws both queue-over-time charts: a bar per minute of the hour, per quarter of the day", async () => {
    await openQueue();
    expect(document.querySelectorAll("#activity-hour rect.finished")).toHaveLength(60);
    expect(document.querySelectorAll("#activity-day rect.finished")).toHaveLength(96);
    expect(document.querySelector("#activity-hour polyline.backlog")?.getAttribute("points")?.split(" ")).toHaveLength(60);
    expect(document.getElementById("activity-hour-backlog")?.textContent).toBe("21");
    const dayFinished = STATS.activity["activity-day"].points.reduce((sum, p) => sum + p.finished, 0);
    expect(document.getElementById("activity-day-finished")?.textContent).toBe(String(dayFinished));
  });

  it("lists stale claims with who claimed them, and asks again with the threshold the user sets", async () => {
    const requested = await openQueue();
    expect(document.getElementById("stale-count")?.textContent).toBe("1");
    const byRun = document.querySelector("#stale-by-run tr[data-claimed-by]");
    expect(byRun?.getAttribute("data-claimed-by")).toBe("queue_dispatcher/run-1");
    expect(byRun?.querySelectorAll("td")[1].textContent).toBe("1");
    const stale = document.querySelector("#stale-claims tr[data-key]");
    expect(stale?.getAttribute("data-claimed-by")).toBe("queue_dispatcher/run-1");
    fireEvent.change(document.getElementById("stale-after")!, { target: { value: "3600" } });
    fireEvent.click(document.getElementById("apply-threshold")!);
    await waitFor(() => expect(requested.some((url) => url.searchParams.get("stale_after") === "3600")).toBe(true));
  });

  it("shows rows with what their shape says, and a refused filter's message", async () => {
    await openQueue();
    expect(await screen.findByText("lease held")).toBeTruthy();
    fireEvent.change(document.getElementById("where")!, { target: { value: '[{"field": "status", "operator": "resembles", "value": "x"}]' } });
    fireEvent.click(document.getElementById("filter")!);
    expect((await screen.findByRole("alert")).textContent).toMatch(/operator/);
  });

  it("tells a user the routes refuse what their role may not read", async () => {
    serve({ connections: () => ({ status: 403, body: { detail: "Forbidden" } }) });
    render(<StorePage />);
    expect((await screen.findByRole("alert")).textContent).toMatch(/may not read/);
    expect(document.getElementById("connections")).toBeNull();
  });
});

describe("bounds, as the server-rendered page's", () => {
  it("lists the first tables and opens any other by name", async () => {
    const many = Array.from({ length: TABLE_LIMIT + 3 }, (_, n) => ({ table: `t${String(n).padStart(4, "0")}`, rows: 1 }));
    const requested = serve({ ...ROUTES, tables: () => ({ body: { connection: "c", tables: many } }) });
    render(<StorePage />);
    fireEvent.click(await screen.findByText("atomic_store_default"));
    await screen.findByText("t0000");
    expect(document.querySelectorAll("#tables tr[data-table]")).toHaveLength(TABLE_LIMIT);
    expect(document.getElementById("hidden-tables")?.textContent).toMatch(/^3 more tables/);
    fireEvent.change(document.getElementById("table-name")!, { target: { value: "t0502" } });
    fireEvent.click(document.getElementById("open-table")!);
    await waitFor(() => expect(requested.some((url) => url.searchParams.get("table") === "t0502")).toBe(true));
  });

  it("keeps the largest statuses and sums the rest", () => {
    const counts = { a: 1, b: 5, c: 5, d: 2, e: 9 };
    expect(largest(counts, 3)).toEqual({ shown: [["b", 5], ["c", 5], ["e", 9]], otherStatuses: 2, otherRows: 3 });
    expect(largest(counts, 10).otherStatuses).toBe(0);
  });

  it("counts stale claims per claiming run, most first", () => {
    const claim = (claimed_by: string | null) => ({ key: "k", claimed_by, claimed_at: null, claim_age_seconds: null, stale: true });
    expect(staleByRun([claim("b"), claim("a"), claim("b"), claim(null)])).toEqual([["b", 2], ["a", 1], ["\u2013", 1]]);
  });
});
