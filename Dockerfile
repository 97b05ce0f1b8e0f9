# syntax=docker/dockerfile:1
# orrery's image: one binary, every role (`orrery serve runtime --components …` for each of
# the runtime's pods, `orrery serve control-plane`, `orrery sweep` for the sweep Job).
#
#   docker build -t orrery .
#   docker run --rm orrery --help
#
# Built in CI (.github/workflows/ci.yml, job `image`), which also runs it on kind with the
# manifests in deploy/. Linted in `make test` by BuildKit's own checks (scripts/dockerfile-lint.sh).

# Build stage: the release binary, with cargo's registry and target directory kept between
# builds (BuildKit cache mounts).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin orrery \
    && cp target/release/orrery /usr/local/bin/orrery

# Run stage: glibc and CA certificates only (distroless), as the non-root user 65532 the
# manifests run as. The scenarios sit at /work/scenarios, where a sweep's results and
# repro commands name them (scenarios/<family>.yaml). No git or shell: `orrery serve git`,
# which drives a local git, is for development machines, not this image.
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=build /usr/local/bin/orrery /usr/local/bin/orrery
COPY scenarios /work/scenarios
WORKDIR /work
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/orrery"]
CMD ["--help"]
