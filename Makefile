# Threadline: the quick start is `make run` and `make test`.
GO ?= go
# Folders with a pinned package.json whose Node packages some tests run.
NODE_DIRS := $(shell find . -name package-lock.json -not -path '*/node_modules/*' -exec dirname {} \; | sort)

.PHONY: run build static test test-short test-binary bench bench-peers bench-peers-smoke bench-growth bench-nonreading lint node-deps chaos aguipb aguipb-verify

## run: start the server on its embedded defaults (SQLite under ./data, reference agent)
run:
	$(GO) run ./cmd/threadline serve

## build: build the binary into ./bin
build:
	$(GO) build -o bin/threadline ./cmd/threadline

## node-deps: install the pinned Node packages the interop tests run
# The folders install at the same time: npm spends most of an install
# waiting on the network and the disk.
node-deps:
	@pids=; for d in $(NODE_DIRS); do \
		if [ ! -d $$d/node_modules ] || [ $$d/package-lock.json -nt $$d/node_modules ]; then \
			echo "npm ci in $$d"; (cd $$d && npm ci --no-audit --no-fund --loglevel=error) & pids="$$pids $$!"; \
		fi; \
	done; \
	status=0; for p in $$pids; do wait $$p || status=1; done; exit $$status

# The real command the tests that run it as a process share (see
# internal/testbin), built once rather than by each test process.
TEST_BINARY := $(CURDIR)/bin/threadline-test

# go test starts the packages' test processes in the order it is given
# them: the longest first, so that none of them starts last and runs alone
# at the end. A third process beside the two cores' worth: these tests wait
# (on leases, processes, the network) more than they compute.
TEST_FIRST := ./server/ ./agui/ ./storage/sqlite/ ./chaos/ ./instanceai/ ./storage/postgres/ ./mapping/ ./instanceai/agenttree/ ./agent/tools/mcptools/ ./workflow/catalog/ ./agent/openai/
TEST_P ?= 3

## test: run every test (PostgreSQL tests need TEST_DATABASE_URL; see docs/testing.md)
test: node-deps test-binary
	THREADLINE_TEST_BINARY=$(TEST_BINARY) $(GO) test -race -count=1 -timeout 30m -p $(TEST_P) $(TEST_FIRST) ./...

## test-short: the tests without the race detector and with -short (which skips the fault harness), for a quick loop
test-short: test-binary
	THREADLINE_TEST_BINARY=$(TEST_BINARY) $(GO) test -short -count=1 ./...

test-binary:
	$(GO) build -o $(TEST_BINARY) ./cmd/threadline

## bench: run the benchmarks (each reports a ratio against a baseline measured in the same run)
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=2s ./...

## bench-peers: Threadline against a go-sse Joe server and Centrifugo v6 over loopback sockets (about 8 minutes once Centrifugo is built, 12 the first time; BENCH_PEERS_FLAGS passes loadclient flags; replay-postgres writes to $TEST_DATABASE_URL and is skipped without it)
bench-peers:
	$(GO) build -o bin/threadline ./cmd/threadline
	cd bench && $(GO) build -o .cache/bin/joeserver ./cmd/joeserver && $(GO) build -o .cache/bin/loadclient ./cmd/loadclient
	bench/centrifugo.sh install
	bench/.cache/bin/loadclient -threadline bin/threadline -joeserver bench/.cache/bin/joeserver -centrifugo bench/centrifugo.sh $(BENCH_PEERS_FLAGS)

## bench-growth: Threadline's throughput and memory as subscribers (10 to 5,000) and threads (1 to 1,000 × 10 subscribers) grow, on --store memory (about 2 minutes; BENCH_GROWTH_FLAGS passes loadclient flags)
bench-growth:
	$(GO) build -o bin/threadline ./cmd/threadline
	cd bench && $(GO) build -o .cache/bin/loadclient ./cmd/loadclient
	bench/.cache/bin/loadclient -mode growth -threadline bin/threadline -repeats 5 $(BENCH_GROWTH_FLAGS)

## bench-nonreading: what 60 and 300 streams that read nothing cost on a 40 MB thread of 1 MB events (SQLite), and whether healthy readers beside them slow down (about 7 minutes; BENCH_NONREADING_FLAGS passes loadclient flags)
bench-nonreading:
	$(GO) build -o bin/threadline ./cmd/threadline
	cd bench && $(GO) build -o .cache/bin/loadclient ./cmd/loadclient
	bench/.cache/bin/loadclient -mode nonreading -threadline bin/threadline -repeats 3 $(BENCH_NONREADING_FLAGS)

## bench-peers-smoke: vet and test the peer benchmark's own module
bench-peers-smoke:
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...

## chaos: the fault harness's long version: every scenario on both buses, a minute of load and repeated faults each, with the server's default leases (about half an hour; needs TEST_DATABASE_URL and TEST_REDIS_URL as the tests do; CHAOS_FLAGS passes cmd/chaos flags; logs of scenarios with anomalies go to chaos-out/)
chaos:
	$(GO) run ./cmd/chaos $(CHAOS_FLAGS)

## aguipb: regenerate the Go types of AG-UI's protobuf binding (agui/aguipb) from its .proto files; needs protoc and protoc-gen-go v1.36.12 (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12)
aguipb:
	cd agui/aguipb && PATH="$$PATH:$$($(GO) env GOPATH)/bin" $(GO) generate .

## aguipb-verify: check agui/aguipb/proto against the ts-proto sources published in @ag-ui/proto 1.0.0 (needs node, npm, protoc)
aguipb-verify:
	agui/aguipb/verify.sh

## lint: gofmt and go vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## static: a static binary (no cgo) in ./bin/threadline-static, as the Dockerfile builds it; VERSION stamps the version it reports
VERSION ?=
static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(if $(VERSION),-X github.com/threadline/threadline/internal/version.stamped=$(VERSION))" -o bin/threadline-static ./cmd/threadline
