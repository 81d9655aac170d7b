# OneRMA engine and tools on Debian 12 with DPDK 22.11 from Debian.
# Run with hugepages mounted and the privileges DPDK needs, and keep the
# engine's IV state (AES-GCM counters that must never repeat) on a volume:
#   docker run --privileged -v /dev/hugepages:/dev/hugepages \
#       -v onerma-state:/var/lib/onerma onerma [rmad flags]
FROM golang:1.26-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        libdpdk-dev libipsec-mb-dev pkg-config gcc make \
        clang llvm libbpf-dev linux-libc-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
        dpdk libdpdk-dev libipsec-mb-dev iproute2 procps ca-certificates make && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/bin/ /usr/local/bin/
VOLUME /var/lib/onerma
ENTRYPOINT ["/usr/local/bin/rmad"]
