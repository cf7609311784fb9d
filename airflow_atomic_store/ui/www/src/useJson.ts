import { useEffect, useState } from "react";

import { getJson, type Params } from "./api";

export interface Loaded<T> {
  data: T | null;
  error: string | null;
  loading: boolean;
}

/** The route's answer for `params`, fetched again whenever they change (null path: none). */
export function useJson<T>(path: string | null, params: Params = {}): Loaded<T> {
  const key = JSON.stringify([path, params]);
  const [state, setState] = useState<Loaded<T>>({ data: null, error: null, loading: path !== null });
  useEffect(() => {
    if (path === null) {
      setState({ data: null, error: null, loading: false });
      return;
    }
    let current = true; // a slower, older answer never overwrites a newer one
    setState((before) => ({ ...before, loading: true }));
    getJson<T>(path, params).then(
      (data) => current && setState({ data, error: null, loading: false }),
      (error: Error) => current && setState({ data: null, error: error.message, loading: false }),
    );
    return () => {
      current = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps -- `key` stands for path and params
  }, [key]);
  return state;
}
