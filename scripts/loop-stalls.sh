#!/bin/bash
# loop.stalls of busy polling cores (gaps of more than 1 ms between two
# iterations: rmactl stats' loop.stalls and loop.stalled_ns) with and
# without control calls, metrics scrapes and garbage collections, in
# alternating windows: quiet, then `rmactl stats` 20 times a second and a
# scrape of /metrics 10 times a second, with GOGC=5 (a collection every
# few scrapes). One rmad on a net_ring loopback (no traffic), busy mode.
#
#   CPUS=1 CTLCPU=0 scripts/loop-stalls.sh      one core on CPU 1, the tools on CPU 0
#   CPUS=0,1 CTLCPU=0,1 scripts/loop-stalls.sh  two cores on both CPUs
#
# W: seconds per window (4), ROUNDS: quiet/control pairs (3), BIN: the
# binaries (bin), PORT: the metrics port (19191). Needs root, jq, curl.
set -eu
BIN=${BIN:-bin}; CPUS=${CPUS:-1}; CTLCPU=${CTLCPU:-0}; W=${W:-4}; ROUNDS=${ROUNDS:-3}; PORT=${PORT:-19191}
D=$(mktemp -d /tmp/onerma-stalls.XXXXXX)
GOGC=5 GODEBUG=gctrace=1 "$BIN/rmad" -eal "--no-pci --no-shconf --no-huge -m 512 --lcores=0@(0-1)" \
	-vdev net_ring0 -port-name net_ring0 -ip 10.77.0.1 -hairpin-self true \
	-socket "$D/rmad.sock" -iv-state "$D/iv" -poll-mode busy -cpu "$CPUS" -metrics "127.0.0.1:$PORT" \
	-log-level info >"$D/rmad.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid; rm -rf "$D"' EXIT
for _ in $(seq 300); do [ -S "$D/rmad.sock" ] && break; sleep 0.1; done
sleep 2
on() { taskset -c "$CTLCPU" "$@"; }
# snap: each core's stalls and stalled ns, space separated.
snap() { on "$BIN/rmactl" -socket "$D/rmad.sock" stats -json | jq -r '[(.cores // [{loop: .loop}])[] | "\(.loop.stalls) \(.loop.stalled_ns)"] | join(" ")'; }
gcs() { grep -c '^gc ' "$D/rmad.log" || true; }
rate() { # before after seconds
	awk -v b="$1" -v a="$2" -v s="$3" 'BEGIN { nb = split(b, B); split(a, A); out = "";
		for (i = 1; i < nb; i += 2) out = out sprintf("core%d %.1f stalls/s (%.1f %% of the time)  ", (i-1)/2, (A[i]-B[i])/s, (A[i+1]-B[i+1])/s/1e7);
		print out }'
}
now() { date +%s.%N; }
for _ in $(seq "$ROUNDS"); do
	a=$(snap); t0=$(now); g=$(gcs); sleep "$W"; b=$(snap); t1=$(now)
	echo "quiet    $(rate "$a" "$b" "$(echo "$t1 - $t0" | bc)") gc $(($(gcs) - g))  load $(cut -d' ' -f1 /proc/loadavg)"
	a=$(snap); t0=$(now); g=$(gcs); end=$(($(date +%s) + W))
	(while [ "$(date +%s)" -lt $end ]; do on "$BIN/rmactl" -socket "$D/rmad.sock" stats >/dev/null; sleep 0.05; done) & c1=$!
	(while [ "$(date +%s)" -lt $end ]; do on curl -s "http://127.0.0.1:$PORT/metrics" >/dev/null; sleep 0.1; done) & c2=$!
	wait $c1 $c2
	b=$(snap); t1=$(now)
	echo "control  $(rate "$a" "$b" "$(echo "$t1 - $t0" | bc)") gc $(($(gcs) - g))  load $(cut -d' ' -f1 /proc/loadavg)"
done
grep '"message":"poll loops running"' "$D/rmad.log" | jq -c '{cores, cpus, gomaxprocs}'
