/*
 * The queue over time, as the server-rendered page draws it (render.activity_chart): bars
 * of items finished per minute (left scale) and the backlog as a line (right scale), in
 * SVG whose colours are the theme's variables (light or dark alike).
 */
import { colors } from "./kit";
import { formatMoment } from "./format";

export interface ActivityPoint {
  start: string;
  finished: number;
  backlog: number;
}

export interface Activity {
  table: string;
  bucket_seconds: number;
  points: ActivityPoint[];
}

const WIDTH = 640;
const LEFT = 64;
const RIGHT = 64;
const TOP = 12;
const BOTTOM = 112;
const BAR = "var(--chakra-colors-green-500, #38a169)";
const LINE = "var(--chakra-colors-blue-500, #3182ce)";

/** The left scale's top: two significant digits below 10 a minute (`0.33`), whole above. */
export function rateLabel(rate: number): string {
  return rate < 10 ? String(Number(rate.toPrecision(2))) : String(Math.round(rate));
}

export function ActivityChart({ id, title, activity }: { id: string; title: string; activity: Activity }) {
  const { points } = activity;
  const minutes = activity.bucket_seconds / 60 || 1;
  const rates = points.map((point) => point.finished / minutes);
  const mostRate = Math.max(0, ...rates) || 1;
  const mostBacklog = Math.max(0, ...points.map((point) => point.backlog)) || 1;
  const step = (WIDTH - LEFT - RIGHT) / Math.max(points.length, 1);
  const plot = BOTTOM - TOP;
  const backlogY = (backlog: number) => BOTTOM - (plot * backlog) / mostBacklog;
  const line = points
    .map((point, index) => `${(LEFT + index * step + step / 2).toFixed(2)},${backlogY(point.backlog).toFixed(2)}`)
    .join(" ");
  const finished = points.reduce((sum, point) => sum + point.finished, 0);
  const backlog = points.length ? points[points.length - 1].backlog : 0;
  const axis = { fill: colors.muted, fontSize: 11 };
  return (
    <figure style={{ margin: "12px 0", color: colors.fg }}>
      <figcaption style={{ fontSize: 14, fontWeight: 600 }}>
        {title}: <span id={`${id}-finished`}>{finished}</span> finished, backlog now{" "}
        <span id={`${id}-backlog`}>{backlog}</span>
        <span style={{ fontWeight: 400, color: colors.muted }}>
          {" "}(bars: finished per minute, left scale; line: backlog, right scale)
        </span>
      </figcaption>
      <svg id={id} role="img" aria-label={`${title}: items finished per minute and the backlog`}
        width={WIDTH} height={BOTTOM + 22} viewBox={`0 0 ${WIDTH} ${BOTTOM + 22}`}>
        <line x1={LEFT} y1={BOTTOM} x2={WIDTH - RIGHT} y2={BOTTOM} stroke={colors.border} />
        {points.map((point, index) => {
          const height = (plot * rates[index]) / mostRate;
          return (
            <rect key={point.start} className="finished" x={LEFT + index * step} y={BOTTOM - height}
              width={Math.max(step - 1, 0.5)} height={height} fill={BAR}>
              <title>{`${formatMoment(point.start)}: ${point.finished} finished, backlog ${point.backlog}`}</title>
            </rect>
          );
        })}
        <polyline className="backlog" points={line} fill="none" stroke={LINE} strokeWidth={1.5} />
        <text x={2} y={TOP + 4} {...axis}>{rateLabel(mostRate)}/min</text>
        <text x={WIDTH - RIGHT + 6} y={TOP + 4} {...axis} fill={LINE}>{mostBacklog}</text>
        <text x={LEFT} y={BOTTOM + 16} {...axis}>{points.length ? formatMoment(points[0].start) : ""}</text>
        <text x={WIDTH - RIGHT} y={BOTTOM + 16} textAnchor="end" {...axis}>now</text>
      </svg>
    </figure>
  );
}
