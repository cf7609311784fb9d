/*
 * The page in Airflow's navigation: the store connections the user may read, a
 * connection's tables, a table's counts by status with its in-flight and stale claims
 * and the queue over time, and its rows with the operators' filter language. It reads
 * the same JSON routes (and so the same access checks) as the server-rendered page.
 */
import { useState } from "react";

import { ActivityChart, type Activity } from "./Chart";
import { formatDuration, formatJson, formatMoment } from "./format";
import { Alert, Badge, Button, Code, DataTable, Heading, Input, Section, Select, Text, type Tone } from "./kit";
import { useJson } from "./useJson";

interface Connection {
  conn_id: string;
  conn_type: string;
  location: string;
  source: string;
}

interface TableSummary {
  table: string;
  rows: number;
}

interface InFlight {
  key: string;
  claimed_by: string | null;
  claimed_at: string | null;
  claim_age_seconds: number | null;
  stale: boolean;
}

interface Stats {
  table: string;
  rows: number;
  status_counts: Record<string, number>;
  oldest_pending_age_seconds: number | null;
  in_flight_count: number;
  in_flight: InFlight[];
  stale_after_seconds: number | null;
  stale_count: number | null;
  stale: InFlight[];
  activity: Record<string, Activity>;
}

interface Row {
  key: string;
  value: unknown;
  created_at: string;
  updated_at: string;
  shape: "lease" | "bucket" | null;
  lease_state: "held" | "expired" | null;
  tokens: number | null;
}

interface RowPage {
  rows: Row[];
  limit: number;
  offset: number;
  has_more: boolean;
}

export const STATUS_TONES: Record<string, Tone> = {
  pending: "orange",
  in_flight: "blue",
  held: "blue",
  done: "green",
  failed: "red",
  dead: "purple",
};

/** The activity charts the stats route answers, with their titles. */
const CHARTS: Array<[string, string]> = [
  ["activity-hour", "Last hour, per minute"],
  ["activity-day", "Last day, per 15 minutes"],
];
const DEFAULT_STALE_AFTER = "600"; // the stale-claim recovery recipe's default
const PAGE_SIZE = 50;
/** As the server-rendered page: 50,000 tables or 200,000 statuses made pages of 11 MB and 70 MB. */
export const TABLE_LIMIT = 500;
export const STATUS_LIMIT = 50;

export function StorePage() {
  const [conn, setConn] = useState<string | null>(null);
  const [table, setTable] = useState<string | null>(null);
  const connections = useJson<{ connections: Connection[] }>("connections");
  const choose = (connId: string) => {
    setConn(connId);
    setTable(null);
  };
  return (
    <div id="atomic-store" style={{ padding: 16 }}>
      <Heading>Atomic Store</Heading>
      <Text muted>
        Queues, claims, leases and buckets of the store connections your role may read; nothing here writes.
      </Text>
      {connections.error && <Alert id="error">{connections.error}</Alert>}
      <div style={{ display: "flex", gap: 48, flexWrap: "wrap", alignItems: "flex-start" }}>
        {connections.data && (
          <Section id="connections-section">
            <Heading level={3}>Connections</Heading>
            {connections.data.connections.length === 0 ? (
              <Text id="no-connections">No store connection you may read is defined.</Text>
            ) : (
              <DataTable
                id="connections"
                rows={connections.data.connections}
                rowKey={(c) => c.conn_id}
                rowData={(c) => ({ conn: c.conn_id })}
                columns={[
                  { title: "Connection", cell: (c) => <Button plain onClick={() => choose(c.conn_id)}>{c.conn_id}</Button> },
                  { title: "Type", cell: (c) => c.conn_type },
                  { title: "Where", cell: (c) => c.location },
                  { title: "Defined in", cell: (c) => c.source },
                ]}
              />
            )}
          </Section>
        )}
        {conn && <Tables conn={conn} chosen={table} onChoose={setTable} />}
      </div>
      {conn && table && <TableView key={`${conn}\u0000${table}`} conn={conn} table={table} />}
    </div>
  );
}

function Tables({ conn, chosen, onChoose }: { conn: string; chosen: string | null; onChoose: (table: string) => void }) {
  const tables = useJson<{ tables: TableSummary[] }>("tables", { conn });
  const [typed, setTyped] = useState("");
  const listed = tables.data?.tables ?? [];
  const shown = listed.slice(0, TABLE_LIMIT);
  return (
    <Section id="tables-section">
      <Heading level={3}>Tables of {conn}</Heading>
      {tables.error && <Alert id="error">{tables.error}</Alert>}
      {tables.data && listed.length === 0 && <Text id="no-tables">This store holds no rows yet.</Text>}
      {shown.length > 0 && (
        <DataTable
          id="tables"
          rows={shown}
          rowKey={(t) => t.table}
          rowData={(t) => ({ table: t.table })}
          columns={[
            {
              title: "Table",
              cell: (t) => <Button plain onClick={() => onChoose(t.table)}>{t.table === chosen ? <b>{t.table}</b> : t.table}</Button>,
            },
            { title: "Rows", cell: (t) => t.rows, numeric: true },
          ]}
        />
      )}
      {listed.length > TABLE_LIMIT && (
        <div style={{ display: "flex", gap: 8, alignItems: "center", flexWrap: "wrap" }}>
          <Text id="hidden-tables">{listed.length - TABLE_LIMIT} more tables, not listed: open one by name</Text>
          <Input id="table-name" label="A table's name" value={typed} onChange={setTyped} width={200} />
          <Button id="open-table" onClick={() => typed.trim() && onChoose(typed.trim())}>Open</Button>
        </div>
      )}
    </Section>
  );
}

/** At most `limit` statuses, the largest counts (ties by name), listed by name; the rest summed. */
export function largest(counts: Record<string, number>, limit: number): { shown: Array<[string, number]>; otherStatuses: number; otherRows: number } {
  const ranked = Object.entries(counts).sort(([a, x], [b, y]) => y - x || (a < b ? -1 : a > b ? 1 : 0));
  const kept = ranked.slice(0, limit).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const rest = ranked.slice(limit);
  return { shown: kept, otherStatuses: rest.length, otherRows: rest.reduce((sum, [, n]) => sum + n, 0) };
}

function TableView({ conn, table }: { conn: string; table: string }) {
  const [typed, setTyped] = useState(DEFAULT_STALE_AFTER);
  const [staleAfter, setStaleAfter] = useState(DEFAULT_STALE_AFTER);
  const stats = useJson<Stats>("stats", { conn, table, stale_after: staleAfter });
  const data = stats.data;
  const counted = largest(data?.status_counts ?? {}, STATUS_LIMIT);
  const statuses = counted.shown;
  const most = Math.max(1, ...statuses.map(([, count]) => count));
  return (
    <>
      <Section id="stats-section">
        <Heading level={3}>{table}</Heading>
        {stats.error && <Alert id="error">{stats.error}</Alert>}
        {data && (
          <>
            <Text>
              <span id="rows">{data.rows}</span> rows; <span id="pending-count">{data.status_counts.pending ?? 0}</span>{" "}
              pending (the oldest waiting <span id="oldest-pending">{formatDuration(data.oldest_pending_age_seconds)}</span>),{" "}
              <span id="in-flight-count">{data.in_flight_count}</span> in flight.
            </Text>
            {statuses.length > 0 && (
              <DataTable
                id="status-counts"
                rows={statuses}
                rowKey={([status]) => status}
                rowData={([status]) => ({ status })}
                columns={[
                  { title: "Status", cell: ([status]) => <Badge tone={STATUS_TONES[status] ?? "gray"}>{status}</Badge> },
                  { title: "Rows", cell: ([, count]) => count, numeric: true },
                  {
                    title: "",
                    cell: ([status, count]) => (
                      <svg width={160} height={10} aria-hidden="true">
                        <rect className="status-bar" width={(160 * count) / most} height={10} rx={2}
                          fill={`var(--chakra-colors-${STATUS_TONES[status] ?? "gray"}-500, #718096)`} />
                      </svg>
                    ),
                  },
                ]}
              />
            )}
            {counted.otherStatuses > 0 && (
              <Text id="other-statuses" muted>
                and {counted.otherStatuses} more statuses with {counted.otherRows} rows in all
              </Text>
            )}
            {CHARTS.map(([id, title]) =>
              data.activity[id] ? <ActivityChart key={id} id={id} title={title} activity={data.activity[id]} /> : null,
            )}
          </>
        )}
      </Section>
      <Section id="claims-section">
        <Heading level={3}>Claims</Heading>
        <div style={{ display: "flex", gap: 8, alignItems: "center", flexWrap: "wrap" }}>
          <Text>Stale after (seconds)</Text>
          <Input id="stale-after" label="Stale after, in seconds" value={typed} onChange={setTyped} width={90} />
          <Button id="apply-threshold" onClick={() => setStaleAfter(typed.trim())}>Apply</Button>
        </div>
        {data && (
          <>
            <Text>
              <span id="stale-count">{data.stale_count ?? 0}</span> stale claims (claimed longer than{" "}
              {formatDuration(data.stale_after_seconds)} ago) of {data.in_flight_count} in flight.
            </Text>
            {data.stale.length === 0 ? (
              <Text id="no-stale" muted>No claim is older than the threshold.</Text>
            ) : (
              <>
                <Text>Stale claims per claiming run (which run died holding rows):</Text>
                <DataTable
                  id="stale-by-run"
                  rows={staleByRun(data.stale)}
                  rowKey={([run]) => run}
                  rowData={([run]) => ({ "claimed-by": run })}
                  columns={[
                    { title: "Claimed by", cell: ([run]) => run },
                    { title: "Stale claims", cell: ([, count]) => count, numeric: true },
                  ]}
                />
                <ClaimTable id="stale-claims" claims={data.stale} />
              </>
            )}
            {data.in_flight.length > 0 && <ClaimTable id="in-flight" claims={data.in_flight} />}
          </>
        )}
      </Section>
      <Rows conn={conn} table={table} />
    </>
  );
}

/** The stale claims counted per `claimedBy`, most first (ties by name). */
export function staleByRun(claims: InFlight[]): Array<[string, number]> {
  const counts = new Map<string, number>();
  for (const claim of claims) {
    const run = claim.claimed_by ?? "\u2013";
    counts.set(run, (counts.get(run) ?? 0) + 1);
  }
  return [...counts.entries()].sort(([a, x], [b, y]) => y - x || (a < b ? -1 : a > b ? 1 : 0));
}

function ClaimTable({ id, claims }: { id: string; claims: InFlight[] }) {
  return (
    <DataTable
      id={id}
      rows={claims}
      rowKey={(c) => c.key}
      rowData={(c) => ({ key: c.key, "claimed-by": c.claimed_by ?? "" })}
      columns={[
        { title: "Key", cell: (c) => c.key },
        { title: "Claimed by", cell: (c) => c.claimed_by ?? "\u2013" },
        { title: "Claimed at", cell: (c) => formatMoment(c.claimed_at) },
        { title: "Age", cell: (c) => formatDuration(c.claim_age_seconds) },
        { title: "", cell: (c) => (c.stale ? <Badge tone="red">stale</Badge> : null) },
      ]}
    />
  );
}

function Rows({ conn, table }: { conn: string; table: string }) {
  const [whereText, setWhereText] = useState("");
  const [match, setMatch] = useState("all");
  const [filter, setFilter] = useState({ where: "", match: "all" });
  const [offset, setOffset] = useState(0);
  const rows = useJson<RowPage>("rows", { conn, table, ...filter, limit: PAGE_SIZE, offset });
  const apply = () => {
    setFilter({ where: whereText.trim(), match });
    setOffset(0);
  };
  return (
    <Section id="rows-section">
      <Heading level={3}>Rows</Heading>
      <div style={{ display: "flex", gap: 8, alignItems: "center", flexWrap: "wrap" }}>
        <Input id="where" label="where (JSON, the operators' filter language)" value={whereText} onChange={setWhereText}
          placeholder='[{"field": "status", "operator": "equals", "value": "pending"}]' width={460} />
        <Select id="match" label="match" value={match} onChange={setMatch} options={["all", "any"]} />
        <Button id="filter" onClick={apply}>Filter</Button>
      </div>
      {rows.error && <Alert id="error">{rows.error}</Alert>}
      {rows.data && (
        <>
          <DataTable
            id="row-list"
            rows={rows.data.rows}
            rowKey={(r) => r.key}
            rowData={(r) => ({ key: r.key })}
            columns={[
              { title: "Key", cell: (r) => r.key },
              {
                title: "",
                cell: (r) =>
                  r.shape === "lease" ? (
                    <Badge tone={r.lease_state === "held" ? "blue" : "gray"}>lease {r.lease_state}</Badge>
                  ) : r.shape === "bucket" ? (
                    <Badge tone="purple">{r.tokens} tokens</Badge>
                  ) : null,
              },
              { title: "Value", cell: (r) => <Code>{formatJson(r.value)}</Code> },
              { title: "Created", cell: (r) => formatMoment(r.created_at) },
              { title: "Updated", cell: (r) => formatMoment(r.updated_at) },
            ]}
          />
          <div style={{ display: "flex", gap: 8, marginTop: 8 }}>
            <Button id="previous" disabled={offset === 0} onClick={() => setOffset(Math.max(offset - PAGE_SIZE, 0))}>Previous</Button>
            <Button id="next" disabled={!rows.data.has_more} onClick={() => setOffset(offset + PAGE_SIZE)}>Next</Button>
          </div>
        </>
      )}
    </Section>
  );
}
