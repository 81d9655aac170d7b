# OneRMA engine and tools on Debian 12 with DPDK 22.11 from Debian.
# Run with hugepages mounted and the privileges DPDK needs, e.g.
#   docker run --privileged -v /dev/hugepages:/dev/hugepages onerma make demo
FROM golang:1.26-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        libdpdk-dev pkg-config gcc make && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
        dpdk libdpdk-dev iproute2 procps ca-certificates make && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/bin/ /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/rmad"]
