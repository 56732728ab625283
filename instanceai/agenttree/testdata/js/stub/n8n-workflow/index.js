'use strict';
// @n8n/api-types requires n8n-workflow at load time; folding events with the
// agent-run reducer never calls into it beyond jsonParse.
module.exports = { jsonParse: JSON.parse };
