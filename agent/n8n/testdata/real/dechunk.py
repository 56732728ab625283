#!/usr/bin/env python3
# dechunk.py IN OUT : decode an HTTP/1.1 chunked body (as saved by curl --raw) to the exact body bytes.
import sys
data = open(sys.argv[1], 'rb').read(); out = bytearray(); i = 0
while True:
    j = data.index(b'\r\n', i); size = int(data[i:j].split(b';')[0], 16); i = j + 2
    if size == 0: break
    out += data[i:i+size]; i += size
    assert data[i:i+2] == b'\r\n'; i += 2
open(sys.argv[2], 'wb').write(out)
