# OneRMA: two commands do everything on a fresh Debian 12 machine (as root):
#   make demo   set up the host, build, run two engines over memif and read
#   make test   set up the host, build, run every test
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO      ?= go
BIN     := bin
# Product tools (tools/): what an operator installs and runs. Lab tools
# (lab/): the benchmark driver, the figures, the soak and the demo.
TOOLS   := rmad rmactl rmaperf rmatop rmakv
LAB     := rmabench rmafigures rmasoak onerma-demo
# The C library (libonerma/, built into libonerma/build), its examples
# (examples/c), which the e2e tests run beside Go applications, and its
# tool onerma-perf (rmaperf's tests in C).
C_EXAMPLES := onerma-c-owner onerma-c-reader onerma-c-hello onerma-cxx-hello
C_TOOLS    := onerma-perf
# The Python package (python/onerma, ctypes over libonerma) runs under
# Debian's python3 with Debian's python3-pytest: not whichever python3 PATH
# finds first (a pyenv or virtualenv python has no Debian packages).
PYTHON  ?= /usr/bin/python3
# BPF programs, compiled here, committed, embedded by their Go packages:
# rmatop's probe and the XDP program of rmad's AF_XDP ports.
BPF_OBJS := engine/telemetry/probe/bpf/delay.bpf.o engine/port/dpdkport/xdp/bpf/steer.bpf.o
# Keep the whole test run well under CI's budget (2 cores).
TEST_TIMEOUT ?= 20m
# Fuzz budgets are execution counts (seconds per target): a duration
# -fuzztime races Go's fuzz coordinator at the deadline and can fail with a
# bare "context deadline exceeded" (golang/go#75804). FUZZTIME=1m (or 1000000x)
# overrides every target's budget.
FUZZTIME ?=
SIM_SEEDS ?= 1000
# make soak's duration; make test runs a 1-minute soak.
SOAK ?= 30m

.PHONY: all setup setup-bench bpf build image demo test pytest fuzz sim bench figures fig9 vet clean pgo soak

all: build

setup:
	@bash scripts/setup.sh

setup-bench:
	@bash scripts/setup.sh --bench

# The objects are committed (go build and go test need no clang); `make
# vet` fails when one differs from what its source compiles to. No path of
# this checkout may enter them (-fdebug-compilation-dir): clones elsewhere
# must build the same bytes.
bpf:
	@set -e; for o in $(BPF_OBJS); do \
		cd $(CURDIR)/$$(dirname $$o); f=$$(basename $$o .o); \
		clang -O2 -g -target bpf -fdebug-compilation-dir=. -I/usr/include/$$(uname -m)-linux-gnu -c $$f.c -o $$f.o; \
		llvm-strip -g $$f.o; \
	done

build: bpf
	@mkdir -p $(BIN)
	@echo "product tools: $(TOOLS)"
	@$(GO) build -o $(BIN)/ $(addprefix ./tools/,$(TOOLS))
	@echo "lab tools: $(LAB)"
	@$(GO) build -o $(BIN)/ $(addprefix ./lab/,$(LAB))
	@echo "libonerma, its tool $(C_TOOLS) and the C examples: $(C_EXAMPLES)"
	@$(MAKE) --no-print-directory -s -C libonerma all examples tools
	@cp $(addprefix libonerma/build/examples/,$(C_EXAMPLES)) $(addprefix libonerma/build/tools/,$(C_TOOLS)) $(BIN)/

# The container images (scripts/image.sh, podman; nothing pulled): a
# Debian 12 base made by debootstrap, the Dockerfile's runtime image
# localhost/onerma:dev, its app target localhost/onerma-app:dev (a non-root
# USER) and its e2e target localhost/onerma-e2e:dev. Cached: a second run
# rebuilds only what changed.
image:
	@bash scripts/setup.sh --containers
	@bash scripts/image.sh

demo: setup build
	@$(BIN)/onerma-demo -rmad $(BIN)/rmad

vet: bpf
	$(GO) vet ./...
	@! git rev-parse --is-inside-work-tree >/dev/null 2>&1 || git diff --quiet -- $(BPF_OBJS) || { echo "$$(git diff --name-only -- $(BPF_OBJS)) differs from what its source compiles to: commit it"; exit 1; }
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

# Every test (libonerma's unit tests under ASan and UBSan, the Python
# package's with pytest, then Go's: unit, simulator seeds, real DPDK
# engines in separate processes, netns/veth af_packet, engines and
# applications in containers), a 1-minute soak, then a short run of each
# fuzz target.
test: setup build vet image
	$(MAKE) --no-print-directory -C libonerma test
	$(MAKE) --no-print-directory pytest
	env $$(bash scripts/image.sh --env) ONERMA_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(BIN)/rmasoak -bin $(BIN) -D 1m
	@$(MAKE) --no-print-directory fuzz

# The Python package's tests (python/tests), after make build: unit tests,
# then real engines from $(BIN) (as root; in CI a test that cannot run
# fails rather than skips). pytest's closing line ("N passed in ...")
# ends the output; a failure fails make.
pytest:
	ONERMA_BIN=$(CURDIR)/$(BIN) PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest -p no:cacheprovider -ra python/tests

# The soak (lab/rmasoak, internal/soak): four engines on the routed
# testbed under verified mixed load for $(SOAK), engines SIGKILLed and
# restarted, router links flapped, keys replaced; the floors scale with
# the duration. Its last line is `soak: ok` only when every check held.
soak: setup build
	$(BIN)/rmasoak -bin $(BIN) -D $(SOAK)

# libonerma's fuzzer takes a run count: FUZZTIME=Nx sets it too.
fuzz:
	@$(MAKE) --no-print-directory -C libonerma fuzz $(if $(filter %x,$(FUZZTIME)),FUZZ_RUNS=$(FUZZTIME:x=))
	@set -e; for t in wire:FuzzDecode:600000x wire:FuzzDecodeICMP:300000x abi:FuzzCommandDecode:500000x ctlmsg:FuzzDecodeRequest:150000x ctlmsg:FuzzDecodeFlat:150000x ctlmsg:FuzzDecodeFlatResponse:150000x aesni:FuzzSealOpen:400000x aesni/mb:FuzzBatchVsAEAD:300000x kv:FuzzDecode:200000x; do \
		IFS=: read -r pkg fn budget <<< "$$t"; \
		[ -z "$(FUZZTIME)" ] || budget=$(FUZZTIME); \
		if grep -rqs "func $$fn(" ./$$pkg; then \
			echo "fuzz $$pkg $$fn $$budget"; \
			$(GO) test ./$$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $$budget; \
		fi; \
	done

# Regenerate tools/rmad/default.pgo, the profile go build optimises rmad
# with (profile-guided optimisation), from loopback engine runs.
pgo: setup build
	@bash scripts/pgo.sh

# Thousands of simulator seeds (make test runs a few).
sim:
	$(GO) test ./engine/sim -count=1 -run TestSimSeeds -timeout 0 -sim.seeds=$(SIM_SEEDS)

# Every setup of bench/RESULTS.md (platform with crypto-scaling, loopback,
# loopback-jumbo, c-loopback (libonerma's onerma-perf beside rmaperf, CPU
# time per op), python-loopback (the Python package beside onerma-perf:
# batched 64 B reads, one read call's latency), hol, memif, testpmd, tcp,
# aes, write-pairs, isolation,
# noisy-neighbour-alone and noisy-neighbour (a tenant's READ latency
# alone and beside a hostile tenant capped by a cgroup's cpu.max),
# telemetry, metrics; READ and
# WRITE; selftest and selftest-memif, the engine's own op generator;
# kv, the key/value caches against memcached and Redis, whose
# Figure 8 rmafigures -kv then draws into figures/fig8.png; fig14, a
# client's unavailability during key rotations, whose Figure 14
# rmafigures -fig14 draws into figures/fig14.png).
# BENCH_ONLY=isolation (comma separated) runs some, BENCH_D=1s shortens
# each measurement (default 5s). The ab setup, an old engine build
# against this one, runs only when asked:
# $(BIN)/rmabench -bin $(BIN) -only ab -ab-old DIR (DIR holding the old
# build's rmad, rmaperf and rmactl; ab also runs ab-loop, each build's
# poll loop sampled with perf at 16 in flight, alone: -only ab-loop).
# rmabench appends each row to BENCH_OUT as it is measured; a setup that
# fails is reported and the others run. Whatever the outcome, the
# headline table at the top of bench/RESULTS.md is then regenerated from
# bench/out.jsonl (rmabench results), and make bench fails if a setup did.
BENCH_ONLY ?=
BENCH_D ?=
BENCH_OUT ?= bench/out.jsonl
bench: setup-bench build
	status=0; \
	$(BIN)/rmabench -bin $(BIN) -out $(BENCH_OUT) $(if $(BENCH_ONLY),-only $(BENCH_ONLY)) $(if $(BENCH_D),-D $(BENCH_D)) || status=$$?; \
	if [ -z "$(BENCH_ONLY)" ] || [[ "$(BENCH_ONLY)" == *kv* ]]; then $(BIN)/rmafigures -out figures -kv $(BENCH_OUT) || status=1; fi; \
	if [ -z "$(BENCH_ONLY)" ] || [[ "$(BENCH_ONLY)" == *fig14* ]]; then $(BIN)/rmafigures -out figures -fig14 $(BENCH_OUT) || status=1; fi; \
	$(BIN)/rmabench results -in bench/out.jsonl -results bench/RESULTS.md || status=1; \
	exit $$status

# The paper's congestion experiments (Fig. 15, Fig. 16) in the simulator:
# PNG plots and RESULTS.md (the numbers next to the paper's) in figures/; and
# Figures 8 and 14 redrawn from make bench's newest kv and fig14 rows in
# bench/out.jsonl.
# make test asserts the same claims (engine/sim/figures_test.go).
figures:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./lab/rmafigures
	$(BIN)/rmafigures -out figures
	@[ ! -f bench/out.jsonl ] || $(BIN)/rmafigures -out figures -kv bench/out.jsonl -fig14 bench/out.jsonl
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory fig9; else echo "fig9 (the cache's failover, on real engines) needs root: sudo make fig9"; fi

# The cache's failover on real engines (the paper's Fig. 9): four rmad on
# a Linux bridge, three rmakv servers, a replica's process or engine
# killed or its regions rekeyed under GET load: figures/fig9*.png and
# figures/fig9.md. Root. FIG9_RUNS=N runs each case N times (default 3).
FIG9_RUNS ?= 3
fig9: setup build
	$(BIN)/rmakv fig9 -rmad $(BIN)/rmad -rmakv $(BIN)/rmakv -out figures -runs $(FIG9_RUNS)

clean:
	rm -rf $(BIN)
	$(MAKE) -C libonerma clean
