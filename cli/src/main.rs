//! The `orrery` binary: [`orrery_cli::main`].

use std::process::ExitCode;

/// Simulations allocate and free JSON bodies at a high rate; mimalloc roughly halves the
/// time glibc's allocator spends on them (measured with perf on queue-overflow).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    orrery_cli::main()
}
