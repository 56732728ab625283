#!/usr/bin/env bash
# Checks that proto/*.proto are the schema @ag-ui/proto 1.0.0 was built from:
# protoc-gen-ts_proto over them must reproduce, byte for byte below the header
# naming the protoc version, the ts-proto sources the published package carries
# in dist/index.js.map. Needs node, npm and protoc.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
npm init -y >/dev/null
npm install --no-audit --no-fund --loglevel=error ts-proto@2.7.7 >/dev/null
tar xzf "$(npm pack --silent @ag-ui/proto@1.0.0)"
mkdir -p generated published
protoc --plugin=protoc-gen-ts_proto=node_modules/.bin/protoc-gen-ts_proto \
	--ts_proto_out=generated \
	--ts_proto_opt=esModuleInterop=true,outputJsonMethods=false,outputClientImpl=false \
	-I "$here/proto" events.proto patch.proto types.proto
node -e '
const fs = require("fs");
const map = JSON.parse(fs.readFileSync("package/dist/index.js.map", "utf8"));
map.sources.forEach((s, i) => {
  const m = s.match(/src\/generated\/(events|types|patch)\.ts$/);
  if (m) fs.writeFileSync("published/" + m[1] + ".ts", map.sourcesContent[i]);
});'
status=0
for f in events types patch; do
	if diff <(sed 1,5d "generated/$f.ts") <(sed 1,5d "published/$f.ts") >/dev/null; then
		echo "$f.proto: matches @ag-ui/proto 1.0.0"
	else
		echo "$f.proto: differs from @ag-ui/proto 1.0.0"; status=1
	fi
done
exit $status
