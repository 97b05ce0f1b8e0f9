#!/bin/sh
# make test's compiler for the workspace's own crates (cargo's RUSTC_WORKSPACE_WRAPPER; the
# Makefile sets it, docs/testing.md explains it). Called as: rustc-wrapper.sh RUSTC ARGS...
#
# 1. Clippy's lints ride on the build: clippy-driver ($CLIPPY_DRIVER, with the Makefile's
#    CLIPPY_ARGS) compiles each crate, so nothing is compiled a second time in check mode.
# 2. A library's own unit-test build (`--test` of orrery_system, orrery_sim, orrery_cli,
#    orrery_conformance) is compiled unoptimised: those tests run in about a second, while
#    optimising a second copy of each library cost about a fifth of make test's cold
#    compile. The libraries the simulations run in, and the integration-test crates, keep
#    their profile (Cargo.toml): a profile cannot tell the two builds of one library apart,
#    since `cargo test` builds every unit with the `test` profile.
set -eu
driver=${CLIPPY_DRIVER:?CLIPPY_DRIVER names clippy-driver (rustup component add clippy)}
case " $* " in
*" --test "*)
    case " $* " in
    *" --crate-name orrery_system "* | *" --crate-name orrery_sim "* | \
        *" --crate-name orrery_cli "* | *" --crate-name orrery_conformance "*)
        exec "$driver" "$@" -C opt-level=0
        ;;
    esac
    ;;
esac
exec "$driver" "$@"
