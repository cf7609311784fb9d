import { describe, expect, it } from "vitest";

import { rateLabel } from "./Chart";
import { formatDuration, formatMoment } from "./format";

describe("formatDuration", () => {
  it("writes two units at most, as the server-rendered page does", () => {
    expect(formatDuration(3725)).toBe("1 h 2 min");
    expect(formatDuration(90061)).toBe("1 d 1 h");
    expect(formatDuration(3600)).toBe("1 h");
    expect(formatDuration(0)).toBe("0 s");
    expect(formatDuration(-75)).toBe("-1 min 15 s");
    expect(formatDuration(null)).toBe("\u2013");
  });
});

describe("formatMoment", () => {
  it("writes a canonical timestamp to the second, in UTC", () => {
    expect(formatMoment("2026-12-01T14:20:00.123456Z")).toBe("2026-12-01 14:20:00 UTC");
    expect(formatMoment(null)).toBe("\u2013");
  });
});

describe("rateLabel", () => {
  it("keeps the chart's scale short enough for its margin", () => {
    expect([rateLabel(1 / 3), rateLabel(5), rateLabel(12.6), rateLabel(1234.5)]).toEqual(["0.33", "5", "13", "1235"]);
  });
});
