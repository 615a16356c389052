# syntax=docker/dockerfile:1
# Build:  docker build -t webchecker-operator:<version> .
#   <version> is Cargo.toml's (the chart's appVersion; `make chart-sync` writes it
#   into the version labels below). `make image` also labels the commit, as
#   --label org.opencontainers.image.revision=$(git rev-parse HEAD) would.
# The image runs as the non-root user 65532 (distroless "nonroot").

FROM rust:1-bookworm AS builder
WORKDIR /src
COPY . .
# Cache mounts keep the crate registry and the build directory between builds
# (BuildKit); the binary is copied out of the cached target directory.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin webchecker-operator --bin webchecker-chart-test \
 && install -D -m 0755 target/release/webchecker-operator /out/webchecker-operator \
 && install -D -m 0755 target/release/webchecker-chart-test /out/webchecker-chart-test

# The chart's `helm test` pod (src/bin/chart_test.rs):
#   docker build --target chart-test -t webchecker-operator-chart-test:<version> .
FROM gcr.io/distroless/cc-debian12:nonroot AS chart-test
LABEL org.opencontainers.image.title="webchecker-operator-chart-test" \
      org.opencontainers.image.description="helm test of the webchecker-operator chart" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
COPY --from=builder /out/webchecker-chart-test /usr/local/bin/webchecker-chart-test
USER 65532:65532
# the sample checker's target
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/webchecker-chart-test"]

# The operator (the default target). glibc + libgcc, CA certificates, no
# shell, user nonroot (65532). `make image` builds the same without an engine.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="webchecker-operator" \
      org.opencontainers.image.description="Kubernetes operator that probes HTTP endpoints described by WebChecker resources" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
COPY --from=builder /out/webchecker-operator /usr/local/bin/webchecker-operator
USER 65532:65532
# /metrics, /healthz, /readyz
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/webchecker-operator"]
