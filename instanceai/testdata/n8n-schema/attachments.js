'use strict';
// Reads a JSON array of attachments on stdin, checks each with n8n's
// instanceAiAttachmentSchema from @n8n/api-types and writes one JSON
// report (run by instanceai/attachment_test.go):
//   {limits: {base64, totalBase64, decoded, totalDecoded}, results: [{success, exact, issues}]}
// exact says the parsed value is deeply equal to the input (zod strips
// unknown keys).
const schema = require('@n8n/api-types/dist/schemas/instance-ai.schema.js');

const inputs = JSON.parse(require('fs').readFileSync(0, 'utf8') || '[]');
const results = inputs.map((a) => {
  const r = schema.instanceAiAttachmentSchema.safeParse(a);
  if (!r.success) return { success: false, exact: false, issues: r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`) };
  return { success: true, exact: JSON.stringify(r.data) === JSON.stringify(a), issues: [] };
});
process.stdout.write(JSON.stringify({
  limits: {
    base64: schema.MAX_ATTACHMENT_BASE64_BYTES,
    totalBase64: schema.MAX_TOTAL_ATTACHMENT_BASE64_BYTES,
    decoded: schema.MAX_ATTACHMENT_DECODED_BYTES,
    totalDecoded: schema.MAX_TOTAL_ATTACHMENT_DECODED_BYTES,
  },
  results,
}));
