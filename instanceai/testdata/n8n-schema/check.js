'use strict';
// Reads a JSON array of {name, event} on stdin, checks each event with
// instanceAiEventSchema from @n8n/api-types and writes one JSON report:
//   {types, ephemeral, results: [{name, success, exact, issues}]}
// success is zod's safeParse result; exact says the parsed value is deeply
// equal to the input (zod strips unknown keys and applies transforms, so an
// event can pass and still lose data).
const schema = require('@n8n/api-types/dist/schemas/instance-ai.schema.js');

function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === 'object') {
    const out = {};
    for (const k of Object.keys(v).sort()) out[k] = canonical(v[k]);
    return out;
  }
  return v;
}

const inputs = JSON.parse(require('fs').readFileSync(0, 'utf8') || '[]');
const results = inputs.map(({ name, event }) => {
  const r = schema.instanceAiEventSchema.safeParse(event);
  if (!r.success) {
    return {
      name,
      success: false,
      exact: false,
      issues: r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`),
    };
  }
  const exact = JSON.stringify(canonical(r.data)) === JSON.stringify(canonical(event));
  return { name, success: true, exact, issues: [] };
});

process.stdout.write(
  JSON.stringify({
    types: schema.instanceAiEventSchema.options.map((o) => o.shape.type.value),
    ephemeral: [...schema.INSTANCE_AI_EPHEMERAL_EVENT_TYPES],
    results,
  }),
);
