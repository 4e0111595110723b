// Redocly's linter over httpapi/openapi.json (make spec-lint): the engine of
// `redocly lint` (@redocly/openapi-core's lint; the CLI would add 160
// packages and nothing a check needs) with the repository's redocly.yaml:
// the recommended rules, no unused component, x-sse-events typed. Prints
// every problem; exits 1 on any error.
import { fileURLToPath } from "node:url";
import { formatProblems, getTotals, lint, loadConfig } from "@redocly/openapi-core";

const spec = fileURLToPath(new URL("../../../httpapi/openapi.json", import.meta.url));
const config = await loadConfig({ configPath: fileURLToPath(new URL("../../../redocly.yaml", import.meta.url)) });
const problems = await lint({ ref: spec, config });
const totals = getTotals(problems);
formatProblems(problems, { format: "stylish", totals, version: "openapi-core", maxProblems: 200 });
console.log(`redocly: ${totals.errors} errors, ${totals.warnings} warnings`);
process.exit(totals.errors > 0 ? 1 : 0);
