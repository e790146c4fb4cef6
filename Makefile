# rowlift: every routine task has a target. `make setup` then `make test` on a
# fresh clone is all CI runs.

GO       ?= go
BIN      := $(CURDIR)/bin
VERSION  := $(shell git describe --always --dirty 2>/dev/null || echo devel)
LDFLAGS  := -X main.version=$(VERSION)
# Pinned tool versions live in tools/go.mod; this stamp rebuilds them when it changes.
TOOLS    := $(BIN)/.tools-$(shell cat tools/go.mod tools/go.sum | sha256sum | cut -c1-12)
export PATH := $(BIN):$(PATH)

.PHONY: setup tools build demo test unit stress lint proto proto-check bench bench-setup bench-sandbox bench-copy bench-lag bench-live bench-apply bench-cutover bench-reshard bench-wide bench-json soak soak-reshard soak-cutover clean

## setup: install a MariaDB server if none is present, percona-toolkit (the tests run
## pt-online-schema-change) and chromium with chromium-driver (the console test), provide a MySQL one (an installed
## MySQL 8.4/9.x mysqld, else a Debian unstable root built once by tools/mysql-root.sh),
## download modules and build bin/rowlift: what running rowlift and its demo need. The
## linters and protobuf generators are built by `make tools`, which `make test` runs first.
setup:
	@if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then \
		echo "installing mariadb-server (tests start their own throwaway servers from it)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q mariadb-server mariadb-client; \
	fi
	@if ! command -v pt-online-schema-change >/dev/null 2>&1; then \
		echo "installing percona-toolkit (the e2e tests run pt-online-schema-change on a moved table)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q percona-toolkit; \
	fi
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		echo "installing chromium and chromium-driver (e2e/console_test.go drives the web console in a headless browser; rowlift never needs them)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium chromium-driver; \
	fi
	./tools/mysql-root.sh
	$(GO) mod download
	$(MAKE) build

## tools: build the pinned linters and protobuf generators into bin/ (once per pin)
tools: $(TOOLS)

$(TOOLS): tools/go.mod tools/go.sum
	rm -f $(BIN)/.tools-*
	cd tools && $(GO) build -o $(BIN)/ \
		github.com/bufbuild/buf/cmd/buf \
		google.golang.org/protobuf/cmd/protoc-gen-go \
		google.golang.org/grpc/cmd/protoc-gen-go-grpc \
		honnef.co/go/tools/cmd/staticcheck
	touch $@

## build: build bin/rowlift
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/rowlift ./cmd/rowlift

## demo: build, then move sample tables between two throwaway servers under live writes
## and compare them (ROWS_DEMO= rows in the large table, default 1,000,000)
ROWS_DEMO ?= 1000000
demo: build
	$(BIN)/rowlift demo --rows $(ROWS_DEMO)

## test: lint, check generated code, then unit and e2e tests against real servers
test: lint proto-check unit

# The timeout guards against a hang; it is not the suite's 20-minute budget. On a
# slower machine e2e alone took 18 minutes (issue 29), and a timeout at the budget
# turned a slow pass into a failure.
unit:
	$(GO) test -count=1 -timeout 30m ./...

## lint: gofmt, go vet, staticcheck, buf lint
lint: $(TOOLS)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "not gofmt-formatted:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	staticcheck ./...
	buf lint

## proto: regenerate the Go code of proto/ with the pinned buf and plugins
proto: $(TOOLS)
	buf generate

## proto-check: fail if the committed generated code differs from a fresh generation
proto-check: proto
	@if [ -n "$$(git status --porcelain -- proto)" ]; then \
		echo "generated code in proto/ is out of date; run 'make proto' and commit:"; \
		git status --porcelain -- proto; git diff --stat -- proto; exit 1; fi

## bench: run every benchmark program; each prints rowlift beside a baseline from the same run.
## The programs that run rowlift (copy, apply, lag, live, cutover, reshard) take -flavor mysql (through their
## flags variables, e.g. COPYFLAGS="-flavor mysql") to run on MySQL servers beside MySQL's own tools;
## results then land in <name>-mysql.json
bench: bench-sandbox bench-copy bench-lag bench-live bench-apply bench-cutover bench-reshard bench-wide bench-json

## bench-sandbox: server start time and memory, template copy vs fresh init (N=servers per method)
N ?= 5
bench-sandbox:
	$(GO) run ./benchmarks/sandbox -n $(N)

## bench-setup: install the tools only the benchmarks run (mydumper and myloader, a baseline of
## bench-copy) if missing; `make setup` leaves them out
bench-setup:
	@if ! command -v mydumper >/dev/null 2>&1 || ! command -v myloader >/dev/null 2>&1; then \
		echo "installing mydumper (bench-copy's mydumper | myloader baseline)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q mydumper; \
	fi

## bench-copy: rowlift copy beside source scan, LOAD DATA, mariadb-dump | mariadb (mysqldump | mysql
## with -flavor mysql) and mydumper | myloader on the same servers (ROWS=table rows, full size 16777216;
## COPYFLAGS=more flags, e.g. -runs 3 -flavor mysql -table sbtest)
ROWS ?= 1000000
bench-copy: bench-setup
	$(GO) run ./benchmarks/copy -rows $(ROWS) $(COPYFLAGS)

## bench-lag: replication lag under a steady write load at half of what one target connection
## commits, and a copy of -rows rows idle and under that load (LAGFLAGS=e.g. -duration 60s -rate 500)
bench-lag:
	$(GO) run ./benchmarks/lag $(LAGFLAGS)

## bench-live: a move of sysbench's sbtest1 (1,000,000 rows) and a heartbeat table under an oltp_write_only
## load at 600 tps over 16 connections, both servers durable (flush=1, sync_binlog=1): copy and catch-up
## time, heartbeat lag, and the load's tps, p50/p95/p99 and CPU per transaction beside a baseline of the
## load alone in the same run (LIVEFLAGS=e.g. -rows 100000 -baseline 5s -tps 300 -flavor mysql)
LIVEFLAGS ?=
bench-live:
	$(GO) run ./benchmarks/live $(LIVEFLAGS)

## bench-apply: catch-up of a backlog of one-client transactions by rowlift (1 worker, N workers,
## commit batching, out-of-order commits) beside MariaDB replicas with 0, 4 and 16 parallel
## threads (MySQL replicas with 0, 4 and 16 workers with -flavor mysql), all on equally durable
## servers (APPLYFLAGS=e.g. -k 5000 -workers 8 -flavor mysql)
APPLYFLAGS ?=
bench-apply:
	$(GO) run ./benchmarks/apply $(APPLYFLAGS)

## bench-cutover: -switches switch/reverse pairs through the Control API under a steady write load routed
## to the side that takes writes: the write pause as rowlift reports it and as the writers saw it, and
## the call's time, beside CHECKSUM TABLE and verify of the moved table (CUTOVERFLAGS=e.g. -switches 20 -rate 1000)
CUTOVERFLAGS ?=
bench-cutover:
	$(GO) run ./benchmarks/cutover $(CUTOVERFLAGS)

## bench-reshard: a 1→4 split (--shards 4, hash of the PK) beside the 1→1 move of the same table in the
## same run: wall time until every target's copy is done and source rows read per row moved
## (ROWS=table rows, RESHARDFLAGS=more flags, e.g. -runs 3)
RESHARDFLAGS ?=
bench-reshard:
	$(GO) run ./benchmarks/reshard -rows $(ROWS) $(RESHARDFLAGS)

## bench-wide: a table of blobs of ~200 KiB (WIDE_MB= MiB in all, full size 2048) copied 1→1 and split 1→4
## with the default chunk settings, beside the target's LOAD DATA of the same rows, with the peak RSS of
## every role (WIDEFLAGS=more flags, e.g. -flavor mysql -row-kb 1024)
WIDE_MB ?= 2048
WIDEFLAGS ?=
bench-wide:
	$(GO) run ./benchmarks/wide -mb $(WIDE_MB) $(WIDEFLAGS)

## bench-json: a MySQL table of ~1 KiB JSON documents (JSON_ROWS= rows, full size 1000000), half of them
## holding DECIMAL/DATE/DATETIME/UNSIGNED scalars, copied by rowlift's typed path and its text path
## (json_as_text) beside the target's LOAD DATA of the same text, with the source's SELECT with and without
## the type map (JSONFLAGS=more flags, e.g. -runs 1 -typed-pct 100 -doc-bytes 4096 -profile DIR); MySQL only
JSON_ROWS ?= 200000
JSONFLAGS ?=
bench-json:
	$(GO) run ./benchmarks/json -rows $(JSON_ROWS) $(JSONFLAGS)

## stress: run TEST (a go test -run pattern) RUNS times in PKG, PARALLEL at once, keeping the
## log and seed of every failing run in OUT (default a new /tmp/rowlift-stress-*); LOAD=1 runs
## the whole suite in a loop beside it, e.g. make stress TEST='TestReshard$$/1to4' RUNS=200 LOAD=1
## (TEST is taken as written: a single $ works too)
TEST ?=
PKG ?= ./e2e
PARALLEL ?= 2
OUT ?=
LOAD ?= 0
stress:
	@test -n '$(value TEST)' || { echo "usage: make stress TEST=<go test -run pattern> [RUNS=20] [PARALLEL=2] [PKG=./e2e] [LOAD=1] [OUT=dir]" >&2; exit 2; }
	./tools/stress.sh $(PKG) '$(value TEST)' $(RUNS) $(PARALLEL) "$(OUT)" $(LOAD)

## soak: the race test, RUNS randomized runs of KEYS keys per table with KILLS kills of
## the applier, streamer and source server each (a failing
## seed replays with ROWLIFT_TEST_SEED=<seed>)
RUNS ?= 20
KEYS ?= 30000
KILLS ?= 5
soak:
	ROWLIFT_RACE_RUNS=$(RUNS) ROWLIFT_RACE_KEYS=$(KEYS) ROWLIFT_RACE_KILLS=$(KILLS) $(GO) test -count=1 -timeout 4h -run 'TestRace$$' -v ./e2e/ \
		| grep -E '^\s*(--- |ok|FAIL|PASS)|race_test.go'

## soak-reshard: the reshard tests (1→2 with kills, 1→4, 2→3, 4→2, 2→1, and the 1→2
## cutover) RUNS times with KEYS keys per table, every case on both flavors
soak-reshard:
	ROWLIFT_RESHARD_KEYS=$(KEYS) ROWLIFT_RESHARD_MYSQL=1 $(GO) test -count=$(RUNS) -timeout 4h -run 'TestReshard$$|TestReshardCutover$$' -v ./e2e/ \
		| grep -E '^\s*(--- |ok|FAIL|PASS)|reshard_test.go'

## soak-cutover: random sequences of operator commands (verify, switch, reverse, forced rollbacks,
## refused commands, kill -9 of any role inside a cutover step) under writers that follow the live
## side through a route file, MINUTES per flavor (FLAVOR=mariadb or mysql for one); the invariants
## are checked after every command, and the closing line counts commands, rollbacks and kills
MINUTES ?= 30
FLAVOR ?=
soak-cutover:
	@log=$$(mktemp); ROWLIFT_SOAK_MINUTES=$(MINUTES) $(GO) test -count=1 -timeout 0 -run 'TestCutoverSoak$$/$(FLAVOR)' -v ./e2e/ > $$log 2>&1; \
		status=$$?; grep -E '^\s*(--- |ok|FAIL|PASS)|soak_cutover_test.go' $$log; \
		[ $$status -eq 0 ] || echo "full log: $$log"; exit $$status

clean:
	rm -rf $(BIN)
