/* Test helpers: a stand-in for the plugin's JSON routes, answering by path. */
import { vi } from "vitest";

export type Answer = { status?: number; body: unknown };
export type Routes = Record<string, (url: URL) => Answer>;

/** Replace `fetch` with the routes; returns the URLs requested, in order. */
export function serve(routes: Routes): URL[] {
  const requested: URL[] = [];
  vi.stubGlobal(
    "fetch",
    vi.fn(async (input: string) => {
      const url = new URL(input);
      requested.push(url);
      const route = routes[url.pathname.split("/atomic-store/api/")[1] ?? ""];
      const { status = 200, body } = route ? route(url) : { status: 404, body: { detail: "Not Found" } };
      return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
    }),
  );
  return requested;
}
