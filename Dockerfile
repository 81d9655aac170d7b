# OneRMA: the engine (rmad) and its tools on Debian 12 with Debian's DPDK
# 22.11. Two stages: build (Go, cgo against the -dev packages) and runtime
# (the shared libraries rmad loads and nothing else). README "Containers"
# has the run lines and the privileges each port type needs.
#
#   docker build -t onerma .                   (pulls debian:bookworm-slim and golang:1.26-bookworm)
#   scripts/image.sh                           (podman, nothing pulled: a debootstrap base and
#                                               the host's Go, passed as BASE and GO_IMAGE)
#   docker build --target app -t onerma-app .  (applications: the same binaries, a non-root USER)
#   docker build --target c-sdk -t onerma-c .  (a C application's build environment, no Go)
#
# BASE is the Debian 12 image both stages start from; GO_IMAGE any image
# with a Go >= 1.26 toolchain in /usr/local/go (only that is taken from it).
ARG BASE=docker.io/library/debian:bookworm-slim
ARG GO_IMAGE=docker.io/library/golang:1.26-bookworm

FROM ${GO_IMAGE} AS go

FROM ${BASE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev pkg-config libdpdk-dev libipsec-mb-dev ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# Go is mounted from GO_IMAGE into the steps that run it, never copied
# into a layer (a cached build then hashes none of it); naming GO_IMAGE
# here makes a new toolchain a new cache key.
ARG GO_IMAGE
ENV PATH=/usr/local/go/bin:$PATH GOPATH=/go GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
# The module proxy: Go's default unless given (scripts/image.sh serves the
# host's module cache as file:///goproxy).
ARG GOPROXY
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=bind,from=go,source=/usr/local/go,target=/usr/local/go --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
# The caches outlive the build: a changed source recompiles only what it
# touches. rmad is built with its profile (tools/rmad/default.pgo).
# e2e/ctrapp, the application of the container test, goes to /out/e2e
# (the e2e stage) and never into the runtime image.
RUN --mount=type=bind,from=go,source=/usr/local/go,target=/usr/local/go \
    --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -o /out/ ./tools/rmad ./tools/rmactl ./tools/rmaperf ./tools/rmatop \
 && go build -trimpath -o /out/e2e/ ./e2e/ctrapp

FROM ${BASE} AS runtime
# What rmad loads: DPDK's libraries, the mempool driver, the poll mode
# drivers of the vdevs (memif, af_packet, AF_XDP with libxdp and libbpf,
# tap) and of common NICs and VFs (PMDS; add librte-net-mlx5-23 for
# Mellanox), and intel-ipsec-mb. No -dev package, no compiler.
ARG PMDS="librte-net-iavf23 librte-net-i40e23 librte-net-ice23 librte-net-ixgbe23 librte-net-e1000-23 librte-net-virtio23 librte-net-vmxnet3-23 librte-net-ena23 librte-net-gve23"
RUN apt-get update \
 && apt-get install -y --no-install-recommends libipsec-mb1 \
        librte-eal23 librte-ethdev23 librte-mbuf23 librte-mempool23 librte-mempool-ring23 librte-ring23 \
        librte-net23 librte-kvargs23 librte-telemetry23 librte-pci23 librte-bus-pci23 librte-bus-vdev23 \
        librte-net-ring23 librte-net-memif23 librte-net-af-packet23 librte-net-af-xdp23 librte-net-tap23 \
        ${PMDS} \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/rmad /out/rmactl /out/rmaperf /out/rmatop /usr/local/bin/
# The control sockets (one directory per tenant: mount each into its
# tenant's containers only, read-only) and the IV and identity state,
# which must outlive the container: a new engine on a fresh state would
# repeat AES-GCM nonces.
VOLUME ["/run/onerma", "/var/lib/onerma"]
# rmad runs as root, as the image's default user and in rmad's pods: its
# capabilities (IPC_LOCK to lock regions and DMA memory, SYS_NICE,
# SYS_RESOURCE; NET_ADMIN, NET_RAW and SYS_ADMIN by port type) are
# effective only for uid 0, since neither Kubernetes nor podman gives a
# non-root process ambient capabilities; and it owns root's directories:
# the tenants' socket directories, which no tenant may write, the IV and
# identity state, hugetlbfs and /dev/vfio. Applications use the app
# target below.
USER root
ENTRYPOINT ["/usr/local/bin/rmad"]

# Applications' image (deploy/kubernetes/app-deployment.yaml): the same
# binaries, run as a user that is not root (any uid connects to a tenant's
# socket of mode 0666; the tenant is the socket, not the uid). Numeric, so
# the kubelet can check runAsNonRoot against it. Build it with --target app.
FROM runtime AS app
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rmaperf"]

# The container test's image (e2e TestContainers): the application image
# and the test's application. Build it with --target e2e.
FROM app AS e2e
COPY --from=build /out/e2e/ctrapp /usr/local/bin/

# A C application's build environment with no Go (e2e TestCInContainer;
# docs/c.md): Debian's C compiler, make, pkg-config and libonerma's two
# dependencies, then libonerma built and installed under /usr/local by its
# own make install, as a user would (headers, libonerma.so and .a,
# onerma.pc, onerma-perf), and the C examples. Build it with --target
# c-sdk; nothing of the Go stages goes into it.
FROM ${BASE} AS c-sdk
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev make pkg-config libssl-dev libjansson-dev \
 && rm -rf /var/lib/apt/lists/*
COPY libonerma /src/libonerma
RUN make -C /src/libonerma install PREFIX=/usr/local \
 && ldconfig \
 && rm -rf /src/libonerma/build
COPY examples/c /usr/local/share/onerma/examples/c
WORKDIR /src

# The default target: the runtime image.
FROM runtime
