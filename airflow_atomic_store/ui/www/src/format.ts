/* How the page writes durations and moments: as the server-rendered page does (render.py). */

const UNITS: Array<[string, number]> = [
  ["d", 86400],
  ["h", 3600],
  ["min", 60],
  ["s", 1],
];

/** 3725 -> "1 h 2 min": two units at most, as people read ages. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) return "\u2013";
  let left = Math.trunc(seconds);
  const sign = left < 0 ? "-" : "";
  left = Math.abs(left);
  const parts: string[] = [];
  for (const [name, size] of UNITS) {
    const amount = Math.floor(left / size);
    left -= amount * size;
    if (amount || parts.length) parts.push(`${amount} ${name}`);
    if (parts.length === 2) break;
  }
  const shown = parts.filter((part) => !part.startsWith("0 "));
  return sign + (shown.length ? shown.join(" ") : "0 s");
}

/** A canonical timestamp (`2026-12-01T14:20:00.000000Z`) to the second: `2026-12-01 14:20:00 UTC`. */
export function formatMoment(stamp: string | null | undefined): string {
  if (!stamp) return "\u2013";
  const found = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})/.exec(stamp);
  return found ? `${found[1]} ${found[2]} UTC` : stamp;
}

export function formatJson(value: unknown): string {
  return JSON.stringify(value, null, 2);
}
