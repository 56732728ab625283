#!/bin/sh
# Start n8n 1.123.81 for recording. Logs to /tmp/n8n-real/n8n.log, PID in /tmp/n8n-real/n8n.pid
cd /tmp/n8n-real
export N8N_USER_FOLDER=/tmp/n8n-real/home N8N_PORT=5678 N8N_LISTEN_ADDRESS=127.0.0.1 \
  N8N_DIAGNOSTICS_ENABLED=false N8N_PERSONALIZATION_ENABLED=false N8N_RUNNERS_ENABLED=false \
  N8N_SECURE_COOKIE=false N8N_EXPRESSION_ENGINE=legacy N8N_VERSION_NOTIFICATIONS_ENABLED=false \
  N8N_TEMPLATES_ENABLED=false N8N_HIRING_BANNER_ENABLED=false N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS=false \
  DB_SQLITE_POOL_SIZE=2 N8N_LOG_LEVEL=info N8N_BLOCK_ENV_ACCESS_IN_NODE=false
nohup ./node_modules/.bin/n8n start >> /tmp/n8n-real/n8n.log 2>&1 &
echo $! > /tmp/n8n-real/n8n.pid
echo "n8n PID $(cat /tmp/n8n-real/n8n.pid)"
