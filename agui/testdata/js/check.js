// Parses every *.golden event in the given folder with @ag-ui/core's
// EventSchemas and every *.input.json with RunAgentInputSchema, and fails
// on a rejected file or on a top-level key the schema does not know.
const fs = require("fs");
const path = require("path");
const core = require("@ag-ui/core/schemas");

const dir = process.argv[2] || "..";
const byType = new Map(core.EventSchemas.options.map((s) => [s.shape.type.value, s]));
let failed = 0, checked = 0;

function unknownKeys(obj, schema) {
  const known = new Set(Object.keys(schema.shape));
  return Object.keys(obj).filter((k) => !known.has(k));
}

for (const name of fs.readdirSync(dir).sort()) {
  let schema;
  if (name.endsWith(".golden")) schema = null;
  else if (name.endsWith(".input.json")) schema = core.RunAgentInputSchema;
  else continue;
  const obj = JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
  if (schema === null) schema = byType.get(obj.type) || core.EventSchemas;
  const res = schema.safeParse(obj);
  checked++;
  if (!res.success) {
    failed++;
    console.log(`FAIL ${name}: ${JSON.stringify(res.error.issues)}`);
    continue;
  }
  const extra = schema.shape ? unknownKeys(obj, schema) : [];
  if (extra.length) {
    failed++;
    console.log(`FAIL ${name}: unknown keys ${extra.join(", ")}`);
  }
}
console.log(`ok ${checked - failed}/${checked}`);
process.exit(failed ? 1 : 0);
