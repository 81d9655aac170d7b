#!/usr/bin/env bash
# Regenerates tools/rmad/default.pgo, the CPU profile `go build` uses for
# profile-guided optimisation of rmad (Go picks up default.pgo in a main
# package's directory by itself). The profile is rmad's own, taken by
# `rmabench -pgo` on the loopback engine exactly as the bench's loopback
# rows start it (busy polling on CPU 1, rmaperf on CPU 0), under the
# workloads make bench measures: READ and WRITE, 64 B and 4 KB, at MTU
# 1500 and 9000, a 4 MB executor READ, and rmad -selftest on one core.
# Run it (as root, after scripts/setup.sh) when the engine's hot path changed much; commit the
# new profile with the numbers of a make bench before and after.
#
#   bash scripts/pgo.sh [seconds per workload, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3}
work=$(mktemp -d /tmp/onerma-pgo.XXXXXX)
trap 'rm -rf "$work"' EXIT

# rmad built without a profile, so this one does not feed on itself.
go build -pgo=off -o "$work/" ./tools/rmad
go build -o "$work/" ./tools/rmaperf ./lab/rmabench
"$work/rmabench" -bin "$work" -D "${secs}s" -pgo tools/rmad/default.pgo
