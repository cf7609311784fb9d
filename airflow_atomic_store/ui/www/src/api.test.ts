import { afterEach, describe, expect, it, vi } from "vitest";

import { ApiError, apiUrl, failureMessage, getJson } from "./api";
import { serve } from "./testing";

afterEach(() => vi.unstubAllGlobals());

describe("apiUrl", () => {
  it("resolves under a sub-path base URI, as Airflow's base_url sets it", () => {
    expect(apiUrl("stats", { conn: "store", table: "jobs" }, "http://host:8080/airflow/")).toBe(
      "http://host:8080/airflow/atomic-store/api/stats?conn=store&table=jobs",
    );
  });

  it("resolves at the root when Airflow is served there", () => {
    expect(apiUrl("connections", {}, "http://host:8080/")).toBe("http://host:8080/atomic-store/api/connections");
  });

  it("leaves out empty parameters and encodes the others", () => {
    const url = new URL(apiUrl("rows", { where: "", match: undefined, table: "a b&c", offset: 0 }, "http://h/"));
    expect([...url.searchParams.entries()]).toEqual([["table", "a b&c"], ["offset", "0"]]);
  });

  it("uses the document's base URI by default", () => {
    expect(apiUrl("connections").startsWith(new URL("atomic-store/api/", document.baseURI).href)).toBe(true);
  });
});

describe("failures", () => {
  it("show the route's own message", () => {
    expect(failureMessage(400, { error: "where: not valid JSON" })).toBe("where: not valid JSON");
  });

  it("say what a refusal means", () => {
    expect(failureMessage(401, { detail: "Not authenticated" })).toMatch(/Sign in/);
    expect(failureMessage(403, { detail: "Forbidden" })).toMatch(/may not read/);
    expect(failureMessage(502, null)).toBe("The request failed (HTTP 502).");
  });

  it("raise an ApiError with the status", async () => {
    serve({ stats: () => ({ status: 503, body: { error: "the store is unreachable" } }) });
    const refused = getJson("stats", { conn: "c" });
    await expect(refused).rejects.toBeInstanceOf(ApiError);
    await expect(refused).rejects.toMatchObject({ status: 503, message: "the store is unreachable" });
  });
});
