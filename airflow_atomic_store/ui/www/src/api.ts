/*
 * The plugin's JSON routes, reached from wherever Airflow is served: every URL is
 * resolved against the document's base URI, which Airflow's UI sets from
 * `[api] base_url` (`<base href>`), so a deployment under a sub-path works unchanged.
 * Same-origin requests carry the UI's `_token` cookie: the routes check the user.
 */

export class ApiError extends Error {
  readonly status: number;

  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

export type Params = Record<string, string | number | undefined | null>;

/** `atomic-store/api/<path>` under the UI's base URI, with the non-empty params. */
export function apiUrl(path: string, params: Params = {}, base: string = document.baseURI): string {
  const url = new URL(`atomic-store/api/${path}`, base);
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") {
      url.searchParams.set(name, String(value));
    }
  }
  return url.toString();
}

const REFUSED: Record<number, string> = {
  401: "Sign in to Airflow to see the store.",
  403: "Your Airflow role may not read this: the store's connections (or this DAG's task instances) are not granted to it.",
};

/** What the user is told for a failed request: the route's own message where it has one. */
export function failureMessage(status: number, body: unknown): string {
  const error = (body as { error?: unknown } | null)?.error;
  if (typeof error === "string" && error) return error;
  return REFUSED[status] ?? `The request failed (HTTP ${status}).`;
}

export async function getJson<T>(path: string, params: Params = {}): Promise<T> {
  const response = await fetch(apiUrl(path, params), {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  });
  let body: unknown = null;
  try {
    body = await response.json();
  } catch {
    body = null; // a proxy's HTML error page: the status says enough
  }
  if (!response.ok) throw new ApiError(response.status, failureMessage(response.status, body));
  return body as T;
}
