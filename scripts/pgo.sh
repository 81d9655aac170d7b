#!/usr/bin/env bash
# Regenerates tools/rmad/default.pgo, the CPU profile `go build` uses for
# profile-guided optimisation of rmad (Go picks up default.pgo in a main
# package's directory by itself). The profile is rmad's own: a loopback
# engine on net_ring (busy polling on CPU 1, rmaperf on CPU 0, as in
# rmabench's loopback rows) serving the workloads make bench measures,
# READ and WRITE, 64 B and 4 KB, at MTU 1500 and 9000, and a 4 MB
# executor READ. Run it (as root, after scripts/setup.sh and make build)
# when the engine's hot path changed much; commit the new profile with
# the numbers of a make bench before and after.
#
#   bash scripts/pgo.sh [seconds per workload, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3}
work=$(mktemp -d /tmp/onerma-pgo.XXXXXX)
trap 'pkill -INT -f "file-prefix=onerma-pgo" 2>/dev/null || true; rm -rf "$work"' EXIT

# Built without a profile, so this one does not feed on itself.
go build -pgo=off -o "$work/rmad" ./tools/rmad
go build -o "$work/rmaperf" ./tools/rmaperf

n=0
run() { # mtu, then rmaperf arguments
	local mtu=$1
	shift
	n=$((n + 1))
	local sock=$work/rmad$n.sock
	"$work/rmad" -eal "--no-pci --no-telemetry --file-prefix=onerma-pgo --lcores=0@(0-1) -m 128 --huge-unlink" \
		-port-name net_ring0 -vdev net_ring0 -ip 10.99.0.1 -socket "$sock" -poll-mode busy -cpu 1 \
		-iv-state "$work/iv$n" -log-level warn -hairpin-self=true -mtu "$mtu" \
		-cpuprofile "$work/cpu$n.pprof" >"$work/rmad$n.log" 2>&1 &
	local pid=$!
	for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
	taskset -c 0 "$work/rmaperf" "$@" -ctl "$sock" -self -D "${secs}s" | tail -1
	kill -INT "$pid"
	wait "$pid" || { cat "$work/rmad$n.log"; exit 1; }
}

for mtu in 1500 9000; do
	for t in read_bw write_bw; do
		for s in 64 4096; do
			run "$mtu" "$t" -s "$s" -O 64
		done
	done
done
run 1500 read_lat -s 64 -O 1
run 1500 write_lat -s 64 -O 1
run 9000 read_bw -s 4194304

go tool pprof -proto "$work"/cpu*.pprof >tools/rmad/default.pgo
echo "pgo: wrote tools/rmad/default.pgo ($(stat -c %s tools/rmad/default.pgo) bytes) from $n runs"
