'use strict';
// @n8n/api-types requires n8n-workflow at load time; validating Instance AI
// events never calls into it beyond jsonParse.
module.exports = { jsonParse: JSON.parse };
