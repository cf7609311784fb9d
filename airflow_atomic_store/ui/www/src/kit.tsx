/*
 * The few building blocks the page and the tab are made of, drawn with the host's
 * Chakra UI where Airflow's UI hands it to plugins (`globalThis.ChakraUI`, Airflow 3.2+),
 * so they take Airflow's theme, light or dark, from the provider they render under.
 * Airflow 3.1 hands plugins React only: there they are plain elements styled with the
 * theme's CSS variables (Chakra defines them on the page, for the current color mode),
 * so the theme still applies. Either way: no stylesheet of our own.
 */
import type { CSSProperties, ReactNode } from "react";

// The host's Chakra UI module: typed loosely, it is whatever version the host ships.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Chakra = Record<string, any>;

/** The host's Chakra UI when it has what the kit draws with, else null. */
export function hostChakra(): Chakra | null {
  const chakra = (globalThis as { ChakraUI?: Chakra }).ChakraUI;
  const complete = chakra && ["Box", "Heading", "Text", "Badge", "Button", "Input", "Code"].every(
    (name) => chakra[name] !== undefined,
  ) && chakra.Table?.Root !== undefined;
  return complete ? chakra : null;
}

const cssVar = (name: string, fallback: string) => `var(--chakra-colors-${name}, ${fallback})`;
export const colors = {
  fg: cssVar("fg", "#1a202c"),
  muted: cssVar("fg-muted", "#718096"),
  border: cssVar("border", "#e2e8f0"),
  subtle: cssVar("bg-muted", "#f7fafc"),
  error: cssVar("fg-error", "#c53030"),
};

/** Badge colours by meaning; Chakra's palettes, or a CSS colour in the fallback. */
export type Tone = "gray" | "green" | "blue" | "orange" | "red" | "purple";
const TONES: Record<Tone, string> = {
  gray: cssVar("gray-500", "#718096"),
  green: cssVar("green-600", "#2f855a"),
  blue: cssVar("blue-600", "#2b6cb0"),
  orange: cssVar("orange-600", "#c05621"),
  red: cssVar("red-600", "#c53030"),
  purple: cssVar("purple-600", "#6b46c1"),
};

interface Common {
  children?: ReactNode;
  id?: string;
  style?: CSSProperties;
  "data-testid"?: string;
}

export function Section({ children, id, style }: Common) {
  const chakra = hostChakra();
  if (chakra) return <chakra.Box as="section" id={id} mt={6} style={style}>{children}</chakra.Box>;
  return <section id={id} style={{ marginTop: 24, color: colors.fg, ...style }}>{children}</section>;
}

export function Heading({ children, id, level = 2 }: Common & { level?: 2 | 3 }) {
  const chakra = hostChakra();
  if (chakra) {
    return (
      <chakra.Heading as={`h${level}`} id={id} size={level === 2 ? "xl" : "md"} mb={3}>
        {children}
      </chakra.Heading>
    );
  }
  const Tag = level === 2 ? "h2" : "h3";
  return (
    <Tag id={id} style={{ fontSize: level === 2 ? 22 : 17, fontWeight: 600, margin: "0 0 12px", color: colors.fg }}>
      {children}
    </Tag>
  );
}

export function Text({ children, id, muted = false, style }: Common & { muted?: boolean }) {
  const chakra = hostChakra();
  if (chakra) {
    return (
      <chakra.Text id={id} color={muted ? "fg.muted" : "fg"} fontSize="sm" my={2} style={style}>
        {children}
      </chakra.Text>
    );
  }
  return (
    <p id={id} style={{ color: muted ? colors.muted : colors.fg, fontSize: 14, margin: "8px 0", ...style }}>
      {children}
    </p>
  );
}

export function Badge({ children, tone = "gray", id }: Common & { tone?: Tone }) {
  const chakra = hostChakra();
  if (chakra) return <chakra.Badge id={id} colorPalette={tone}>{children}</chakra.Badge>;
  return (
    <span
      id={id}
      style={{ border: `1px solid ${TONES[tone]}`, color: TONES[tone], borderRadius: 4, padding: "0 6px", fontSize: 12, fontWeight: 600 }}
    >
      {children}
    </span>
  );
}

export function Button({
  children,
  id,
  onClick,
  disabled = false,
  plain = false,
}: Common & { onClick: () => void; disabled?: boolean; plain?: boolean }) {
  const chakra = hostChakra();
  if (chakra) {
    return (
      <chakra.Button id={id} size="xs" variant={plain ? "plain" : "outline"} onClick={onClick} disabled={disabled}
        textDecoration={plain ? "underline" : undefined} px={plain ? 0 : undefined}>
        {children}
      </chakra.Button>
    );
  }
  const look: CSSProperties = plain
    ? { background: "none", border: "none", padding: 0, textDecoration: "underline", color: TONES.blue }
    : { background: "none", border: `1px solid ${colors.border}`, borderRadius: 4, padding: "2px 10px", color: colors.fg };
  return (
    <button type="button" id={id} onClick={onClick} disabled={disabled} style={{ cursor: "pointer", font: "inherit", fontSize: 14, ...look }}>
      {children}
    </button>
  );
}

export function Input({
  id,
  value,
  onChange,
  placeholder,
  width = 120,
  label,
}: Common & { value: string; onChange: (value: string) => void; placeholder?: string; width?: number; label: string }) {
  const chakra = hostChakra();
  if (chakra) {
    return (
      <chakra.Input id={id} aria-label={label} size="sm" width={`${width}px`} value={value} placeholder={placeholder}
        onChange={(event: { target: { value: string } }) => onChange(event.target.value)} />
    );
  }
  return (
    <input id={id} aria-label={label} value={value} placeholder={placeholder} onChange={(event) => onChange(event.target.value)}
      style={{ width, font: "inherit", fontSize: 14, padding: "2px 6px", color: colors.fg, background: "transparent", border: `1px solid ${colors.border}`, borderRadius: 4 }} />
  );
}

export function Select({ id, value, onChange, options, label }: Common & {
  value: string; onChange: (value: string) => void; options: string[]; label: string;
}) {
  // A native select in both cases: Chakra's own differs between its versions; this one
  // takes the theme's colours from its variables.
  return (
    <select id={id} aria-label={label} value={value} onChange={(event) => onChange(event.target.value)}
      style={{ font: "inherit", fontSize: 14, padding: "2px 6px", color: colors.fg, background: "transparent", border: `1px solid ${colors.border}`, borderRadius: 4 }}>
      {options.map((option) => <option key={option} value={option}>{option}</option>)}
    </select>
  );
}

export function Code({ children }: Common) {
  const chakra = hostChakra();
  const style: CSSProperties = { whiteSpace: "pre-wrap", wordBreak: "break-word", margin: 0, fontSize: 12 };
  if (chakra) return <chakra.Code as="pre" display="block" p={2} style={style}>{children}</chakra.Code>;
  return <pre style={{ ...style, padding: 8, background: colors.subtle, color: colors.fg, borderRadius: 4 }}>{children}</pre>;
}

export interface Column<Row> {
  title: string;
  cell: (row: Row) => ReactNode;
  numeric?: boolean;
}

/** A table of rows; each `<tr>` carries the row's `data-*` attributes (`rowData`). */
export function DataTable<Row>({
  id,
  columns,
  rows,
  rowKey,
  rowData,
}: {
  id: string;
  columns: Array<Column<Row>>;
  rows: Row[];
  rowKey: (row: Row) => string;
  rowData?: (row: Row) => Record<string, string>;
}) {
  const chakra = hostChakra();
  const attributes = (row: Row) => Object.fromEntries(
    Object.entries(rowData?.(row) ?? {}).map(([name, value]) => [`data-${name}`, value]),
  );
  if (chakra) {
    const { Table } = chakra;
    return (
      <Table.Root id={id} size="sm" variant="outline" width="auto">
        <Table.Header>
          <Table.Row>
            {columns.map((column) => (
              <Table.ColumnHeader key={column.title} textAlign={column.numeric ? "end" : "start"}>{column.title}</Table.ColumnHeader>
            ))}
          </Table.Row>
        </Table.Header>
        <Table.Body>
          {rows.map((row) => (
            <Table.Row key={rowKey(row)} {...attributes(row)}>
              {columns.map((column) => (
                <Table.Cell key={column.title} textAlign={column.numeric ? "end" : "start"} verticalAlign="top">{column.cell(row)}</Table.Cell>
              ))}
            </Table.Row>
          ))}
        </Table.Body>
      </Table.Root>
    );
  }
  const cell: CSSProperties = { borderBottom: `1px solid ${colors.border}`, padding: "4px 10px", verticalAlign: "top" };
  return (
    <table id={id} style={{ borderCollapse: "collapse", fontSize: 14, color: colors.fg }}>
      <thead>
        <tr>
          {columns.map((column) => (
            <th key={column.title} style={{ ...cell, textAlign: column.numeric ? "right" : "left", color: colors.muted }}>{column.title}</th>
          ))}
        </tr>
      </thead>
      <tbody>
        {rows.map((row) => (
          <tr key={rowKey(row)} {...attributes(row)}>
            {columns.map((column) => (
              <td key={column.title} style={{ ...cell, textAlign: column.numeric ? "right" : "left" }}>{column.cell(row)}</td>
            ))}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function Alert({ children, id }: Common) {
  return <p id={id} role="alert" style={{ color: colors.error, fontSize: 14, margin: "8px 0" }}>{children}</p>;
}
