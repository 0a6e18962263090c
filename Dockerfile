# syntax=docker/dockerfile:1.7
# The shardring operator image: built with the pinned Rust toolchain, shipped
# on distroless (glibc, CA certificates, no shell) as the non-root user 65532.
#
#   docker build -t ghcr.io/shardring/shardring:dev .

FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
# The registry, git and target caches persist between builds; the binary is
# copied out of the cache mount because the mount is gone after this step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build -p shardring --release --locked \
    && install -D -m 0755 target/release/shardring /out/shardring

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/shardring /usr/local/bin/shardring
USER 65532:65532
# One glibc malloc arena (the manifests set it too): see docs/deploy.md, Memory.
ENV MALLOC_ARENA_MAX=1
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/shardring"]
CMD ["run"]
