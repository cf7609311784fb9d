// Records, next to the built bundle, the hash of the sources it was built from and of
// the bundle itself; with --check, fails when either no longer matches. The Python
// suite (tests/test_ui_bundle.py) computes the same hashes without Node: a change to
// the sources without `make ui` fails `make test`. Test files do not go into the bundle
// and are left out.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";

const www = fileURLToPath(new URL("..", import.meta.url));
const staticDir = join(www, "..", "static");
const ROOT_FILES = ["package.json", "package-lock.json", "tsconfig.json", "vite.config.ts"];
const isTest = (name) => /\.test\.tsx?$/.test(name);

function walk(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return walk(path);
    return isTest(entry.name) ? [] : [path];
  });
}

const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");

export function sourcesHash() {
  const files = [...ROOT_FILES.map((name) => join(www, name)), ...walk(join(www, "src"))];
  const lines = files
    .map((path) => [relative(www, path).split(sep).join("/"), sha256(readFileSync(path))])
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([name, digest]) => `${digest}  ${name}\n`);
  return sha256(lines.join(""));
}

const recorded = join(staticDir, "atomic-store.sha256");
const expected =
  `sources ${sourcesHash()}\n` +
  `bundle ${sha256(readFileSync(join(staticDir, "atomic-store.js")))}\n`;
if (process.argv.includes("--check")) {
  const found = readFileSync(recorded, "utf8");
  if (found !== expected) {
    console.error(`${recorded} does not match: run \`make ui\`\nfound:\n${found}expected:\n${expected}`);
    process.exit(1);
  }
} else {
  writeFileSync(recorded, expected);
}
