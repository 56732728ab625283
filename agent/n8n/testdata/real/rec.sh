#!/bin/sh
# rec.sh NAME URLPATH JSONBODY : POST to n8n, save NAME.headers, NAME.chunked.raw (wire bytes, curl --raw)
# and NAME.ndjson (de-chunked body bytes, exact). Run from the recordings dir.
name=$1; path=$2; body=$3
start=$(date +%s.%N)
curl -sN --raw -D "$name.headers" -X POST "http://127.0.0.1:5678$path" -H 'Content-Type: application/json' -d "$body" -o "$name.chunked.raw"
end=$(date +%s.%N)
if grep -qi '^transfer-encoding: chunked' "$name.headers"; then python3 /tmp/n8n-real/dechunk.py "$name.chunked.raw" "$name.ndjson"; else cp "$name.chunked.raw" "$name.body"; fi
echo "$name: $(head -1 "$name.headers" | tr -d '\r') $(wc -c < "$name.chunked.raw") wire bytes, $(echo "$end - $start" | bc) s"
