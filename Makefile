# LightQ. `make run` builds every command into bin/ (lightq, lqcat, lqbench, lqdump) and starts a
# broker on 127.0.0.1:7450 with ./data; `make test` runs what CI runs.
GO        ?= go
BIN       := bin
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck
PKGS      := ./...

.PHONY: all build run test test-loaded unit race lint fuzz fuzz-short bench microbench metricsbench metrics-overhead bench-e2e bench-fetch compare compare-smoke crash cluster chaos chaos-short soak build-386 clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

run: build
	exec ./$(BIN)/lightq $(ARGS)

# The whole default suite: formatting, vet, staticcheck, a 32-bit build, every test under the
# race detector, and a short run of every fuzz target.
test: lint build-386 race fuzz-short

# make test RUNS times in a row (default 3) while stress-ng keeps every CPU busy (installed from
# Debian's packages when missing): the suite must not depend on an idle machine.
RUNS ?= 3
test-loaded:
	RUNS=$(RUNS) ./tools/test-loaded.sh

unit:
	$(GO) test -count=1 $(PKGS)

race:
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)

$(STATICCHECK):
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

build-386:
	GOARCH=386 $(GO) build $(PKGS)

# Every fuzz target for FUZZTIME (`make fuzz FUZZTIME=10m` for a long run). The short run in
# `make test` counts executions instead of time: a time-bounded run that ends while the fuzzer
# handles a new input fails with "context deadline exceeded". FuzzRecover creates a file per
# input (~250 execs/s), so it gets a smaller count.
FUZZTIME  ?= 10s
FUZZ_SLOW := FuzzRecover
fuzz-short: FUZZTIME=20000x
fuzz-short: FUZZTIME_SLOW=1000x
fuzz-short: fuzz
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    t=$(FUZZTIME); case " $(FUZZ_SLOW) " in *" $$f "*) t=$(or $(FUZZTIME_SLOW),$(FUZZTIME));; esac; \
	    echo "fuzz $$pkg $$f ($$t)"; \
	    $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$$t $$pkg; \
	  done; \
	done

# The original LightQ's benchmark matrix: 100/256/512/1024-byte messages, transient and
# durable (fsync=always), one producer and one consumer, broker and clients as processes.
bench:
	KINDS="transient durable" SIZES="100 256 512 1024" ROUNDS=1 ./tools/bench-e2e.sh

# Micro-benchmarks with allocations.
microbench:
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS)

# The two metrics libraries considered (prometheus/client_golang, VictoriaMetrics/metrics) side
# by side on the broker's per-batch operations. Its own module (tools/metricsbench), so the
# broker does not depend on the one it did not choose. COUNT=N rounds (default 5).
COUNT ?= 5
metricsbench:
	cd tools/metricsbench && $(GO) test -run='^$$' -bench=. -benchmem -count=$(COUNT) .

# Broker and clients as separate processes on loopback: lqbench e2e for 100 and 1024 bytes.
bench-e2e:
	./tools/bench-e2e.sh

# Durable catch-up from the page cache: GB/s and broker CPU per GB, sendfile vs read+write.
bench-fetch:
	./tools/bench-fetch.sh

# LightQ vs NATS side by side (installs the pinned NATS peers on first use, ~4 min; then ~45 min): prints the
# table and rewrites the generated sections of docs/PERFORMANCE.md (single broker) and
# docs/PERFORMANCE-REPLICATION.md (three-broker clusters), and docs/compare-throughput.svg.
# COMPARE_CASES=durable,fsync runs a subset and then leaves the docs alone, except
# COMPARE_CASES=replicated (three-broker clusters of each, ~20 min), which rewrites the replication
# file only; make compare-smoke runs every case (or COMPARE_CASES) in seconds with tiny counts,
# to check the tool, not to measure.
COMPARE_ROUNDS ?= 3
COMPARE_CASES ?=
COMPARE_DOCS = -doc docs/PERFORMANCE.md -doc-replicated docs/PERFORMANCE-REPLICATION.md
compare:
	$(GO) run ./tools/compare -rounds $(COMPARE_ROUNDS) $(if $(COMPARE_CASES),-cases $(COMPARE_CASES) $(if $(filter-out replicated,$(COMPARE_CASES)),,$(COMPARE_DOCS)),$(COMPARE_DOCS) -svg docs/compare-throughput.svg) $(ARGS)

compare-smoke:
	$(GO) run ./tools/compare -smoke $(if $(COMPARE_CASES),-cases $(COMPARE_CASES)) $(ARGS)

# make compare's transient and durable cases with LightQ's metrics off and on (--http-addr, and
# /metrics scraped every SCRAPE, default 200ms), alternated ROUNDS times (default 5).
metrics-overhead:
	./tools/metrics-overhead.sh

# kill -9 crash cycles against the real binary (CRASH_CYCLES over the three fsync modes).
crash:
	LIGHTQ_CRASH_CYCLES=$(or $(CRASH_CYCLES),200) $(GO) test -count=1 -timeout 30m -run '^TestCrash' -v ./test/crash/

# Three brokers of one cluster on loopback in the foreground, data in ./data/cluster/N; prints
# their addresses, the admin password and lqcat commands to try. Ctrl-C stops all three.
# CLUSTER_PORT moves the ports (default 7451: clients 7451-7453, cluster 7461-7463, http 7471-7473).
cluster: build
	./tools/cluster.sh

# Fault cycles against three real brokers (test/chaos): CHAOS_CYCLES (default 20) over three
# runs (acks 1 and 2 on fsync=always, acks 1 on fsync=never), drawn under CHAOS_SEED (default
# the clock, always printed). Ends with the line
#   chaos: cycles=N acked=N lost=0 duplicated=0 divergent=0 failover_p99_ms=N
# and fails unless lost, duplicated and divergent are 0 and the failover p99 is within 2 s.
chaos:
	CHAOS_CYCLES=$(or $(CHAOS_CYCLES),20) $(if $(CHAOS_SEED),CHAOS_SEED=$(CHAOS_SEED)) \
	  $(GO) test -count=1 -timeout 90m -run '^TestChaos$$' -v ./test/chaos/

# The short chaos run that make test includes: four cycles on one run (skipped, saying so,
# while the broker refuses cluster settings).
chaos-short:
	$(GO) test -count=1 -timeout 15m -run '^TestChaosShort$$' -v ./test/chaos/

# The long versions: crash cycles, the log's power-loss loop and torn tails at 10x, and
# 512 MiB through a tiny receive buffer.
soak: crash
	LIGHTQ_LONG=1 $(GO) test -count=1 -timeout 30m ./log/...
	LIGHTQ_SENDFILE_MIB=512 $(GO) test -count=1 -timeout 30m -run 'TestFetchExact' -v ./broker/

clean:
	rm -rf $(BIN)
