#!/usr/bin/env bash
# OneRMA's container images, built with podman from Debian's packages and
# this checkout alone: no registry is asked for an image. Idempotent and
# cached: what exists is kept, and the Dockerfile's layers (and Go's build
# and module caches) make a rebuild after a change cost only what changed.
#
#   scripts/image.sh         build what is missing or stale
#   scripts/image.sh --env   print the environment (NAME=VALUE ...) that points
#                            podman at the configuration and storage below and
#                            names the images: export $(scripts/image.sh --env)
#
# Images (podman's storage in $ONERMA_CONTAINERS, default
# /var/lib/onerma-containers: the host's own /etc/containers and
# /var/lib/containers are neither read nor changed):
#   localhost/onerma-base:bookworm   Debian 12 (minbase) by debootstrap from the host's
#                                    apt mirror, with bookworm-updates and -security
#   localhost/onerma-go:VERSION      the host's Go toolchain (/usr/local/go), nothing else:
#                                    the Dockerfile's GO_IMAGE (golang:* cannot be pulled here)
#   localhost/onerma:dev             the Dockerfile's runtime image: rmad, rmactl, rmaperf, rmatop (root: rmad)
#   localhost/onerma-app:dev         its app target: the same as a non-root USER, for applications
#   localhost/onerma-e2e:dev         its e2e target: the app image plus e2e/ctrapp (e2e TestContainers)
#   localhost/onerma-c:dev           its c-sdk target: Debian with gcc, pkg-config, libssl-dev,
#                                    libjansson-dev and libonerma (make install PREFIX=/usr/local),
#                                    no Go (e2e TestCInContainer builds a C application in it)
# Needs root and scripts/setup.sh --containers (debootstrap, podman, runc).
set -euo pipefail
cd "$(dirname "$0")/.."

ctr=${ONERMA_CONTAINERS:-/var/lib/onerma-containers}
run=/run/onerma-containers
conf=$ctr/containers.conf
storage_conf=$ctr/storage.conf
base=localhost/onerma-base:bookworm
image=${ONERMA_IMAGE:-localhost/onerma:dev}
app_image=${ONERMA_APP_IMAGE:-localhost/onerma-app:dev}
e2e_image=${ONERMA_E2E_IMAGE:-localhost/onerma-e2e:dev}
c_image=${ONERMA_C_IMAGE:-localhost/onerma-c:dev}

if [ "${1:-}" = "--env" ]; then
	echo "CONTAINERS_CONF=$conf CONTAINERS_STORAGE_CONF=$storage_conf ONERMA_IMAGE=$image ONERMA_APP_IMAGE=$app_image ONERMA_E2E_IMAGE=$e2e_image ONERMA_C_IMAGE=$c_image"
	exit 0
fi

log() { printf 'image: %s\n' "$*"; }
[ "$(id -u)" = 0 ] || { log "building images needs root"; exit 1; }
for c in debootstrap podman runc; do
	command -v $c >/dev/null || { log "$c missing: run scripts/setup.sh --containers"; exit 1; }
done
export PATH=/usr/local/go/bin:$PATH

# writeif FILE: stdin into FILE unless FILE already holds exactly that.
writeif() {
	local tmp
	tmp=$(mktemp)
	cat >"$tmp"
	if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

# Podman's configuration for OneRMA, apart from the host's. Overlay when
# this kernel and file system mount it, else vfs (slower, whole copies);
# chosen once, as the storage holds images of that driver.
mkdir -p "$ctr/storage" "$run"
driver=$(sed -n 's/^driver = "\(.*\)"$/\1/p' "$storage_conf" 2>/dev/null || true)
if [ -z "$driver" ]; then
	driver=vfs
	probe=$(mktemp -d "$ctr/probe.XXXXXX")
	mkdir -p "$probe"/{l,u,w,m}
	if mount -t overlay overlay -o "lowerdir=$probe/l,upperdir=$probe/u,workdir=$probe/w" "$probe/m" 2>/dev/null; then
		umount "$probe/m"
		driver=overlay
	fi
	rm -rf "$probe"
fi
writeif "$storage_conf" <<EOF
# Written by OneRMA's scripts/image.sh.
[storage]
driver = "$driver"
graphroot = "$ctr/storage"
runroot = "$run/storage"
EOF
# runc: crun refuses a host whose cgroups are hybrid (v1 controllers and
# v2 beside them). cgroupfs: no systemd is asked. Limits: podman's
# defaults (1048576 open files and processes) are above what a host
# without CAP_SYS_RESOURCE may raise its limits to, and runc would fail to
# set them: the open files are the host's own, the processes the host's
# capped at pid_max (podman lowers its own limit to that).
nofile=$(ulimit -Hn) nproc=$(ulimit -Hu) pidmax=$(cat /proc/sys/kernel/pid_max)
[ "$nofile" = unlimited ] && nofile=1048576
{ [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pidmax" ]; } && nproc=$pidmax
writeif "$conf" <<EOF
# Written by OneRMA's scripts/image.sh.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$run/events.log"
tmp_dir = "$run/libpod"
volume_path = "$ctr/volumes"
EOF
export CONTAINERS_CONF=$conf CONTAINERS_STORAGE_CONF=$storage_conf

# The host's apt mirror (deb822 or one-line sources) and proxy: the base
# image and the Dockerfile's apt-get use what the host uses.
mirror() { # mirror SUITE: the URI the host's sources give for SUITE
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v s="$1" 'BEGIN{RS=""} /(^|\n)Types:[^\n]*deb([ \n]|$)/ && match($0, /(^|\n)Suites:[^\n]*/) {
			suites = substr($0, RSTART, RLENGTH); if (index(" " suites " ", " " s " ") == 0) next
			if (match($0, /(^|\n)URIs:[ \t]*[^ \t\n]+/)) { u = substr($0, RSTART, RLENGTH); sub(/.*URIs:[ \t]*/, "", u); print u; exit } }' "$f"
	done
	awk -v s="$1" '$1 == "deb" && $3 == s { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true
}
main_uri=$(mirror bookworm | head -1)
sec_uri=$(mirror bookworm-security | head -1)
main_uri=${main_uri:-http://deb.debian.org/debian}
sec_uri=${sec_uri:-http://deb.debian.org/debian-security}
proxy=$(apt-config dump 2>/dev/null | awk -F'"' '/^Acquire::http::Proxy /{print $2; exit}')
if [ -n "$proxy" ]; then export http_proxy=${http_proxy:-$proxy}; fi

if ! podman image exists "$base"; then
	t0=$(date +%s)
	work=$(mktemp -d /var/tmp/onerma-rootfs.XXXXXX)
	trap 'umount -R "$work/rootfs/proc" 2>/dev/null || true; rm -rf "$work"' EXIT
	log "debootstrap bookworm (minbase) from $main_uri"
	debootstrap --variant=minbase bookworm "$work/rootfs" "$main_uri" >"$work/debootstrap.log" 2>&1 ||
		{ tail -20 "$work/debootstrap.log"; exit 1; }
	cat >"$work/rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $main_uri
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $sec_uri
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
	rm -f "$work/rootfs/etc/apt/sources.list"
	# A mirror serving a snapshot has Release files past their Valid-Until:
	# the image trusts them as the host does.
	if apt-config dump 2>/dev/null | grep -q '^Acquire::Check-Valid-Until "false"'; then
		echo 'Acquire::Check-Valid-Until "false";' >"$work/rootfs/etc/apt/apt.conf.d/99onerma-mirror"
	fi
	# As Debian's own images: no recommends, no documentation, no caches.
	cat >"$work/rootfs/etc/apt/apt.conf.d/90onerma-image" <<'EOF'
APT::Install-Recommends "false";
Acquire::Languages "none";
EOF
	cat >"$work/rootfs/etc/dpkg/dpkg.cfg.d/90onerma-image" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
	mount -t proc proc "$work/rootfs/proc"
	chroot "$work/rootfs" /bin/sh -c 'export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get upgrade -y -qq && apt-get clean' \
		>"$work/upgrade.log" 2>&1 || { tail -20 "$work/upgrade.log"; log "updating the base rootfs failed"; exit 1; }
	umount "$work/rootfs/proc"
	rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/*.bin "$work"/rootfs/var/log/*.log \
		"$work"/rootfs/dev/* "$work"/rootfs/run/* "$work"/rootfs/tmp/*
	: >"$work/rootfs/etc/machine-id"
	tar --numeric-owner -C "$work/rootfs" -c . |
		podman import --quiet --change 'CMD ["/bin/bash"]' --message "debootstrap bookworm minbase from $main_uri" - "$base" >/dev/null
	rm -rf "$work"
	trap - EXIT
	log "$base built in $(($(date +%s) - t0)) s"
fi

gover=$(go env GOVERSION)
goimage=localhost/onerma-go:${gover#go}
if ! podman image exists "$goimage"; then
	log "$goimage from $(go env GOROOT)"
	tar --numeric-owner -C "$(go env GOROOT)" --transform 's,^\.,usr/local/go,' -c . |
		podman import --quiet --message "$gover from the host" - "$goimage" >/dev/null
fi

# The images of this checkout. The builds share the Dockerfile's layers.
# apt reaches the host's mirror over the host's network; Go modules come
# from the host's module cache, filled here by the host's go (a host that
# reaches the module proxy through a TLS proxy of its own trusts that
# proxy's CA, an image does not), served to the build as a file GOPROXY:
# go.sum checks every module, and the build needs no TLS.
t0=$(date +%s)
go mod download
modcache=$(go env GOMODCACHE)
build=(podman build --network host --layers
	-v "$modcache/cache/download:/goproxy:ro" --build-arg GOPROXY=file:///goproxy
	--build-arg "BASE=$base" --build-arg "GO_IMAGE=$goimage" -f Dockerfile .)
"${build[@]}" --target runtime -t "$image" >"$ctr/build.log" 2>&1 || { tail -40 "$ctr/build.log"; exit 1; }
"${build[@]}" --target app -t "$app_image" >>"$ctr/build.log" 2>&1 || { tail -40 "$ctr/build.log"; exit 1; }
"${build[@]}" --target e2e -t "$e2e_image" >>"$ctr/build.log" 2>&1 || { tail -40 "$ctr/build.log"; exit 1; }
"${build[@]}" --target c-sdk -t "$c_image" >>"$ctr/build.log" 2>&1 || { tail -40 "$ctr/build.log"; exit 1; }
# What earlier builds left: every untagged image that no build
# above made or took from its cache (their layers are the next build's
# cache; podman image prune would take those too).
keep=$(grep -oE '^--> (Using cache )?[0-9a-f]{11,}' "$ctr/build.log" | awk '{print substr($NF, 1, 11)}' | sort -u)
for id in $(podman images --all --quiet --filter dangling=true); do
	grep -qx "${id:0:11}" <<<"$keep" || podman rmi "$id" >/dev/null 2>&1 || true
done
log "$image, $app_image, $e2e_image and $c_image ($driver storage) in $(($(date +%s) - t0)) s"
