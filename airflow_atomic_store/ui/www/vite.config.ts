/*
 * The bundle Airflow's UI loads (react_apps, Airflow 3.1+): one UMD file whose global is
 * the component (``AirflowPlugin``), React and its JSX runtime taken from the host's
 * ``globalThis`` (3.1+ hands both to plugins), CSS none (styles are inline or the host's
 * Chakra UI). Written into the package (``../static``) so the wheel ships it.
 */
import { defineConfig } from "vitest/config";

export default defineConfig({
  build: {
    outDir: "../static",
    emptyOutDir: false, // the folder also holds the recorded source hash
    minify: true,
    sourcemap: false,
    lib: {
      entry: "src/main.tsx",
      name: "AirflowPlugin",
      formats: ["umd"],
      fileName: () => "atomic-store.js",
    },
    rollupOptions: {
      external: ["react", "react/jsx-runtime"],
      output: {
        exports: "default",
        globals: { react: "React", "react/jsx-runtime": "ReactJSXRuntime" },
      },
    },
  },
  test: {
    environment: "happy-dom",
    include: ["src/**/*.test.tsx", "src/**/*.test.ts"],
  },
});
