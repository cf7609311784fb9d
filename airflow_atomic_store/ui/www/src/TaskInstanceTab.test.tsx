import { cleanup, render, screen } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";

import AtomicStore from "./main";
import { mapIndexOf, TaskInstanceTab } from "./TaskInstanceTab";
import { serve } from "./testing";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const TI = { dagId: "queue_dispatcher", runId: "manual__1", taskId: "drain" };
const row = (key: string, state: string, status: string | null, fence: number | null = null) => ({
  table: "pending_ops", key, state, status, claimed_at: "2026-12-07T00:00:00.000000Z", fence, expires_at: null,
});

const USED = {
  task_instance: { dag_id: "queue_dispatcher", run_id: "manual__1", task_id: "drain", map_index: -1, latest_try_started_at: "2026-12-07T00:00:01.000000Z" },
  used: true,
  connections: [
    {
      conn_id: "atomic_store_default",
      used: true,
      task_key: "queue_dispatcher/manual__1/drain/-1",
      execution_id: "queue_dispatcher/manual__1",
      receipts: [
        {
          key: "queue_dispatcher/manual__1/drain/-1", step: null, primitive: "claim", table: "pending_ops", target: "",
          outcome: "claimed 3", claimed: ["op-1", "op-2", "op-3"], created_at: "2026-12-07T00:00:00.000000Z",
          expires_at: "2026-12-14T00:00:00.000000Z", replayed: true,
        },
      ],
      claimed: [row("op-1", "held", "in_flight"), row("op-2", "finished", "done"), row("op-3", "handed_back", "pending")],
      run_rows: [{ ...row("slot-0", "held", "held", 7), table: "warehouse_slots" }],
      tables_searched: 3,
      tables: 3,
      truncated: false,
    },
    { conn_id: "elsewhere", error: "connection refused", status: 503 },
  ],
};

describe("TaskInstanceTab", () => {
  it("lists the rows the task claimed, where each stands now, its receipts and the run's slot", async () => {
    const requested = serve({ "task-instance": () => ({ body: USED }) });
    render(<TaskInstanceTab {...TI} />);
    await screen.findByText("claimed 3");
    const claimed = [...document.querySelectorAll("#ti-claimed tr[data-key]")].map((tr) => [tr.getAttribute("data-key"), tr.getAttribute("data-state")]);
    expect(claimed).toEqual([["op-1", "held"], ["op-2", "finished"], ["op-3", "handed_back"]]);
    expect(document.getElementById("held-count")?.textContent).toBe("1");
    expect(screen.getByText("replayed")).toBeTruthy();
    const slot = document.querySelector("#ti-run-rows tr[data-key='slot-0']");
    expect(slot?.textContent).toContain("7");
    expect(screen.getByRole("alert").textContent).toBe("elsewhere: connection refused");
    expect(Object.fromEntries(requested[0].searchParams)).toEqual({
      dag_id: "queue_dispatcher", run_id: "manual__1", task_id: "drain", map_index: "-1",
    });
  });

  it("says in one line that a task did not use the store", async () => {
    serve({ "task-instance": () => ({ body: { ...USED, used: false, connections: [{ conn_id: "atomic_store_default", used: false, receipts: [], claimed: [], run_rows: [] }] } }) });
    render(<TaskInstanceTab {...TI} />);
    expect((await screen.findByText("This task did not use the store.")).id).toBe("not-used");
    expect(document.getElementById("ti-claimed")).toBeNull();
  });

  it("shows nothing of a store to a user the routes refuse", async () => {
    serve({ "task-instance": () => ({ status: 401, body: { detail: "Not authenticated" } }) });
    render(<TaskInstanceTab {...TI} />);
    expect((await screen.findByRole("alert")).textContent).toMatch(/Sign in/);
    expect(document.getElementById("ti-claimed")).toBeNull();
  });

  it("asks for a mapped task instance by its map index", async () => {
    const requested = serve({ "task-instance": () => ({ body: USED }) });
    render(<TaskInstanceTab {...TI} mapIndex="4" />);
    await screen.findByText("claimed 3");
    expect(requested[0].searchParams.get("map_index")).toBe("4");
    expect([mapIndexOf(undefined), mapIndexOf(""), mapIndexOf("2"), mapIndexOf(3), mapIndexOf("x")]).toEqual([-1, -1, 2, 3, -1]);
  });
});

describe("row states", () => {
  it("has a label and a colour for every state the route answers", async () => {
    const { STATES } = await import("./TaskInstanceTab");
    expect(Object.keys(STATES).sort()).toEqual(["deleted", "expired", "finished", "gone", "handed_back", "held"]);
  });
});

describe("the bundle's component", () => {
  it("is the tab when the UI hands it a task instance, the page otherwise", async () => {
    serve({
      "task-instance": () => ({ body: USED }),
      connections: () => ({ body: { connections: [] } }),
    });
    const tab = render(<AtomicStore {...TI} />);
    await screen.findByText("claimed 3");
    tab.unmount();
    render(<AtomicStore />);
    expect((await screen.findByText("No store connection you may read is defined.")).id).toBe("no-connections");
  });
});
