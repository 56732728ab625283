#!/bin/sh
# Builds and runs Centrifugo v6 for the peer benchmark.
#
#   bench/centrifugo.sh install      build it into bench/.cache/bin (once)
#   bench/centrifugo.sh serve PORT   write bench/.cache/centrifugo-PORT.json, exec it
#
# The configuration is what a user would set for this job: the
# unidirectional SSE transport, the HTTP publish API behind an API key,
# anonymous clients (client.insecure: no JWT, any channel; a benchmark on
# loopback only), and history with recovery on channels without a
# namespace. Recovery is bounded three ways: history_size publications,
# history_ttl, and client.recovery_max_publication_limit (300 by default;
# raised here so that a 100,000-publication history can be recovered). A
# recovery is written to the connection's queue at once, so its byte limit
# (client.queue_max_size, 1 MiB by default, beyond which the client is
# disconnected as slow) is raised to 64 MiB too.
set -eu
CENTRIFUGO_VERSION=v6.9.1
here=$(cd "$(dirname "$0")" && pwd)
cache="$here/.cache"
bin="$cache/bin/centrifugo"

case "${1:-}" in
install)
	if [ ! -x "$bin" ] || [ "$(cat "$cache/centrifugo.version" 2>/dev/null)" != "$CENTRIFUGO_VERSION" ]; then
		mkdir -p "$cache/bin"
		GOBIN="$cache/bin" GOFLAGS= go install "github.com/centrifugal/centrifugo/v6@$CENTRIFUGO_VERSION"
		echo "$CENTRIFUGO_VERSION" > "$cache/centrifugo.version"
	fi
	echo "$bin"
	;;
serve)
	port=${2:?usage: centrifugo.sh serve PORT}
	history=${HISTORY_SIZE:-100000}
	conf="$cache/centrifugo-$port.json"
	cat > "$conf" <<JSON
{
  "http_server": {"address": "127.0.0.1", "port": $port},
  "log": {"level": "error"},
  "client": {
    "insecure": true,
    "recovery_max_publication_limit": $history,
    "queue_max_size": 67108864
  },
  "http_api": {"key": "bench-api-key"},
  "uni_sse": {"enabled": true},
  "channel": {
    "without_namespace": {
      "history_size": $history,
      "history_ttl": "600s",
      "force_recovery": true
    }
  }
}
JSON
	exec "$bin" --config "$conf"
	;;
*)
	echo "usage: $0 install | serve PORT" >&2
	exit 2
	;;
esac
