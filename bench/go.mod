module github.com/threadline/threadline/bench

go 1.26.0

require github.com/tmaxmax/go-sse v0.11.0

require github.com/lib/pq v1.12.3
