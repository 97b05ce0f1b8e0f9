#!/bin/sh
# make test's compiler for the workspace's own crates (cargo's RUSTC_WORKSPACE_WRAPPER, set by
# scripts/linted.sh; docs/testing.md explains it). Called as: rustc-wrapper.sh RUSTC ARGS...
#
# 1. Clippy's lints ride on the build: clippy-driver ($CLIPPY_DRIVER, with CLIPPY_ARGS)
#    compiles each crate, so nothing is compiled a second time in check mode.
# 2. Test builds (`--test`: a library's unit tests, an integration-test crate) are compiled
#    unoptimised. The simulations they start run in the libraries, which keep their profile
#    (Cargo.toml), so the tests take as long as before (measured: sim's and cli's test
#    binaries within 5 % in CPU time), while optimising them was about a quarter of the
#    workspace's compile. A profile cannot do this: `cargo test` builds every unit, the
#    libraries included, with the `test` profile.
set -eu
driver=${CLIPPY_DRIVER:?CLIPPY_DRIVER names clippy-driver (rustup component add clippy)}
case " $* " in
*" --test "*) exec "$driver" "$@" -C opt-level=0 ;;
esac
exec "$driver" "$@"
