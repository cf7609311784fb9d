/*
 * The "Atomic Store" tab of a task instance: what it claimed and where each of those
 * rows stands now, its keyed calls (idempotency receipts: key, primitive, when,
 * replayed or applied) and what its DAG run holds (rows whose `claimedBy`, or lease
 * whose `holder`, is the run: a semaphore slot or a lease with its fence), in every
 * store connection the user may read.
 */
import { formatMoment } from "./format";
import { Alert, Badge, DataTable, Heading, Section, Text, type Tone } from "./kit";
import { useJson } from "./useJson";

export interface TaskInstanceProps {
  dagId?: string;
  runId?: string;
  taskId?: string;
  mapIndex?: string | number;
}

interface Receipt {
  key: string;
  step: string | null;
  primitive: string;
  table: string;
  target: string;
  outcome: string;
  claimed: string[];
  created_at: string;
  expires_at: string;
  replayed: boolean | null;
}

export interface TaskRow {
  table: string;
  key: string;
  state: "held" | "finished" | "handed_back" | "expired" | "gone" | "deleted";
  status: string | null;
  claimed_at: string | null;
  fence: number | null;
  expires_at: string | null;
}

interface StoreUse {
  conn_id: string;
  error?: string;
  used?: boolean;
  task_key?: string;
  execution_id?: string;
  receipts?: Receipt[];
  claimed?: TaskRow[];
  run_rows?: TaskRow[];
  tables_searched?: number;
  tables?: number;
  truncated?: boolean;
}

interface TabAnswer {
  task_instance: { dag_id: string; run_id: string; task_id: string; map_index: number; latest_try_started_at: string | null };
  used: boolean;
  connections: StoreUse[];
}

export const STATES: Record<TaskRow["state"], [string, Tone]> = {
  held: ["holds it", "blue"],
  finished: ["finished", "green"],
  handed_back: ["handed back", "orange"],
  expired: ["expired", "gray"],
  gone: ["not this run's now", "gray"],
  deleted: ["deleted by its claim", "purple"],
};

/** The map index the UI hands the tab (a string from its route, absent when not mapped). */
export function mapIndexOf(value: string | number | undefined): number {
  const index = Number(value);
  return value === undefined || value === "" || !Number.isInteger(index) ? -1 : index;
}

export function TaskInstanceTab({ dagId, runId, taskId, mapIndex }: TaskInstanceProps) {
  const answer = useJson<TabAnswer>("task-instance", {
    dag_id: dagId,
    run_id: runId,
    task_id: taskId,
    map_index: mapIndexOf(mapIndex),
  });
  return (
    <div id="atomic-store-task" style={{ padding: 16 }}>
      {answer.loading && !answer.data && <Text muted>Reading the store…</Text>}
      {answer.error && <Alert id="error">{answer.error}</Alert>}
      {answer.data && !answer.data.used && (
        <Text id="not-used">This task did not use the store.</Text>
      )}
      {answer.data?.connections.map((store) => <StoreSection key={store.conn_id} store={store} />)}
    </div>
  );
}

function StoreSection({ store }: { store: StoreUse }) {
  if (store.error) {
    return <Alert id={`error-${store.conn_id}`}>{`${store.conn_id}: ${store.error}`}</Alert>;
  }
  if (!store.used) return null;
  const receipts = store.receipts ?? [];
  const claimed = store.claimed ?? [];
  const runRows = store.run_rows ?? [];
  return (
    <Section id={`store-${store.conn_id}`}>
      <Heading level={3}>{store.conn_id}</Heading>
      {claimed.length > 0 && (
        <>
          <Text>
            Rows this task claimed (<span id="claimed-count">{claimed.length}</span>); it still holds{" "}
            <span id="held-count">{claimed.filter((row) => row.state === "held").length}</span>:
          </Text>
          <RowTable id="ti-claimed" rows={claimed} />
        </>
      )}
      {receipts.length > 0 && (
        <>
          <Text>Its keyed calls (idempotency receipts):</Text>
          <DataTable
            id="ti-receipts"
            rows={receipts}
            rowKey={(r) => r.key}
            rowData={(r) => ({ key: r.key, primitive: r.primitive })}
            columns={[
              { title: "Call", cell: (r) => (r.step ? `${r.primitive} (${r.step})` : r.primitive) },
              { title: "Table", cell: (r) => r.table },
              { title: "Row", cell: (r) => r.target || "\u2013" },
              { title: "Outcome", cell: (r) => r.outcome },
              { title: "When", cell: (r) => formatMoment(r.created_at) },
              {
                title: "Latest try",
                cell: (r) =>
                  r.replayed === null ? "\u2013" : r.replayed ? <Badge tone="purple">replayed</Badge> : <Badge tone="green">applied</Badge>,
              },
              { title: "Key", cell: (r) => <code>{r.key}</code> },
            ]}
          />
        </>
      )}
      {runRows.length > 0 && (
        <>
          <Text>
            What its DAG run holds (<code>claimedBy</code> or a lease&apos;s <code>holder</code> is{" "}
            <code>{store.execution_id}</code>, shared by the run&apos;s tasks):
          </Text>
          <RowTable id="ti-run-rows" rows={runRows} />
        </>
      )}
      {store.truncated && (
        <Text muted id="truncated">
          Lists cut short: {store.tables_searched} of {store.tables} tables searched, at most 1,000 rows and 200 receipts.
        </Text>
      )}
    </Section>
  );
}

function RowTable({ id, rows }: { id: string; rows: TaskRow[] }) {
  return (
    <DataTable
      id={id}
      rows={rows}
      rowKey={(r) => `${r.table}\u0000${r.key}`}
      rowData={(r) => ({ key: r.key, table: r.table, state: r.state })}
      columns={[
        { title: "Table", cell: (r) => r.table },
        { title: "Key", cell: (r) => r.key },
        { title: "Now", cell: (r) => <Badge tone={STATES[r.state][1]}>{STATES[r.state][0]}</Badge> },
        { title: "Status", cell: (r) => r.status ?? "\u2013" },
        { title: "Claimed at", cell: (r) => formatMoment(r.claimed_at) },
        { title: "Fence", cell: (r) => (r.fence ?? "\u2013"), numeric: true },
        { title: "Lease until", cell: (r) => formatMoment(r.expires_at) },
      ]}
    />
  );
}
