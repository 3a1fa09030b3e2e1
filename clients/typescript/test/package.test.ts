/** The package as `npm pack` makes it: the compiled JavaScript and its declarations, nothing of the sources or
 * tests. Run after `npm run build` (`npm test` builds first). */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { dirname, resolve } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";

// build/test/package.test.js -> the package folder.
const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

it("npm pack lists the compiled modules with their types, and no sources or tests", () => {
  const output = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], {
    cwd: packageDir,
    encoding: "utf8",
  });
  const [packed] = JSON.parse(output) as { name: string; files: { path: string }[] }[];
  assert.ok(packed !== undefined);
  assert.equal(packed.name, "compassmem-client");
  const files = packed.files.map((file) => file.path).sort();
  for (const module of ["index", "client", "errors", "types", "openapi"]) {
    assert.ok(files.includes(`dist/${module}.js`), `dist/${module}.js in ${files}`);
    assert.ok(files.includes(`dist/${module}.d.ts`), `dist/${module}.d.ts in ${files}`);
  }
  assert.ok(files.includes("package.json") && files.includes("README.md"));
  assert.deepEqual(files.filter((path) => !path.startsWith("dist/")), ["README.md", "package.json"]);
});

it("the package's entry point loads and exports the client and its errors", async () => {
  const entry = (await import(resolve(packageDir, "dist", "index.js"))) as Record<string, unknown>;
  for (const name of ["Client", "CompassmemError", "BadRequest", "Unauthorized", "Forbidden", "NotFound",
                      "Unavailable", "ServerError", "DEFAULT_TIMEOUT_MS"]) {
    assert.ok(name in entry, name);
  }
});
