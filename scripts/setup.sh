#!/usr/bin/env bash
# Host set-up for OneRMA: idempotent, safe to run again and again.
#   scripts/setup.sh          packages, hugepages, mounts (demo and tests)
#   scripts/setup.sh --bench  the same plus the benchmark peers' tools (ucx-utils,
#                             memcslap of libmemcached-tools) and perf (ab-loop)
#   scripts/setup.sh --containers  the same plus what builds and runs the
#                             container images (make image, the container test)
# Needs root for apt, hugepages and mounts. Without root it only checks.
set -euo pipefail

want_bench=0 want_containers=0
for a in "$@"; do
	case $a in
	--bench) want_bench=1 ;;
	--containers) want_containers=1 ;;
	*) echo "setup: unknown argument $a" >&2; exit 2 ;;
	esac
done

log() { printf 'setup: %s\n' "$*"; }

# clang, llvm (llvm-strip), libbpf-dev and linux-libc-dev build rmatop's BPF program;
# dpdk-dev also brings dpdk-testpmd (make bench's testpmd setup).
pkgs=(libdpdk-dev dpdk dpdk-dev libipsec-mb-dev pkg-config gcc make iproute2 procps clang llvm libbpf-dev linux-libc-dev)
# libonerma (the C library): OpenSSL's libcrypto and jansson to build it,
# g++ for its C++ header check and example, libclang-rt-14-dev for clang's
# sanitizers and libFuzzer (make test, make fuzz).
pkgs+=(libssl-dev libjansson-dev g++ libclang-rt-14-dev)
# memcached and redis-server (which brings redis-tools' redis-benchmark):
# the key/value peers, whose drivers internal/kvload's tests run against.
pkgs+=(memcached redis-server)
# The Python package (python/onerma) and its tests: Debian's python3 and
# pytest; numpy for the tests of its numpy views (the package runs
# without it).
pkgs+=(python3 python3-pytest python3-numpy)
# linux-perf: the ab-loop setup samples each build's poll loop with perf.
[ $want_bench = 1 ] && pkgs+=(ucx-utils libmemcached-tools linux-perf)
# ping: the AF_XDP test checks the kernel still answers on the engine's
# interface; the routed testbed (e2e TestRouted) pings engines from its router.
command -v ping >/dev/null || pkgs+=(iputils-ping)

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		log "missing packages ${missing[*]} and not root: install them first"; exit 1
	fi
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# A stale or empty package list makes apt miss packages: refresh once.
	if ! apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; then
		apt-get update -qq
		apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
fi

# Containers (scripts/image.sh, e2e TestContainers): debootstrap builds the
# base image from Debian's packages (no registry image is pulled), podman
# builds and runs the images with runc (crun refuses hybrid cgroups), conmon
# watches them. Without recommends (buildah, fuse-overlayfs, slirp4netns:
# podman builds itself, storage is the kernel's overlay, networks are
# namespaces the tests make). Only for make image and make test: make demo
# stays light.
if [ $want_containers = 1 ]; then
	cmissing=()
	for p in debootstrap podman runc conmon; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || cmissing+=("$p")
	done
	if [ ${#cmissing[@]} -gt 0 ]; then
		if [ "$(id -u)" != 0 ]; then
			log "missing packages ${cmissing[*]} and not root: install them first"; exit 1
		fi
		log "installing ${cmissing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		if ! apt-get install -y -qq --no-install-recommends "${cmissing[@]}" >/dev/null 2>&1; then
			apt-get update -qq
			apt-get install -y -qq --no-install-recommends "${cmissing[@]}" >/dev/null
		fi
	fi
fi

# Installing memcached and redis-server starts their system services
# where systemd runs: the tests and benchmarks start their own servers
# on free ports, so stop and disable those.
if [ -d /run/systemd/system ] && [ "$(id -u)" = 0 ]; then
	for svc in memcached redis-server; do
		if systemctl is-enabled --quiet "$svc" 2>/dev/null || systemctl is-active --quiet "$svc" 2>/dev/null; then
			systemctl disable --now "$svc" >/dev/null 2>&1 || true
		fi
	done
fi

# promtool (Debian's prometheus package) checks the page of rmad -metrics
# in the tests. Without recommends (the node exporter), and where systemd
# started the Prometheus server on installing it, stopped and disabled:
# the tests need the tool, not the server.
if ! command -v promtool >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		log "missing promtool (package prometheus) and not root: install it first"; exit 1
	fi
	log "installing prometheus (for promtool)"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1; then
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends prometheus >/dev/null
	fi
	if [ -d /run/systemd/system ]; then
		systemctl disable --now prometheus >/dev/null 2>&1 || true
	fi
fi

# Go: the module needs Go >= 1.26; the machine image ships it in /usr/local/go.
if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
	log "no Go toolchain found (need Go >= 1.26 in PATH or /usr/local/go)"; exit 1
fi

# Hugepages: 2 MB pages for DPDK mempools, memif and portal shared memory.
# Two engines plus their apps fit in 512 MB. Where the kernel refuses, the
# engines fall back to --no-huge and plain shared memory (slower, correct).
if [ "$(id -u)" = 0 ]; then
	want=${ONERMA_HUGEPAGES:-256}
	have=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
	if [ "$have" -lt "$want" ]; then
		echo "$want" > /proc/sys/vm/nr_hugepages 2>/dev/null || true
		have=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
	fi
	mkdir -p /dev/hugepages
	if ! mountpoint -q /dev/hugepages; then
		mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null || log "cannot mount hugetlbfs: engines will run with --no-huge"
	fi
	# Pages held by files of crashed runs come back only when the files go
	# (only when no engine runs: a live engine's files are in use).
	if ! pgrep -x rmad >/dev/null 2>&1; then
		find /dev/hugepages -maxdepth 1 -name 'onerma*' -type f -delete 2>/dev/null || true
	fi
	mkdir -p /run/onerma
	log "hugepages: $have x 2 MB ($(grep HugePages_Free /proc/meminfo | awk '{print $2}') free)"
else
	log "not root: hugepages and mounts left as they are"
fi
log "ok"
