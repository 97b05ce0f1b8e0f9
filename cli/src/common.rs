//! What every command shares: the failure type and its exit class, the variant flag, seed
//! ranges, loading a scenario file, how many child processes to run, and the refusal to
//! simulate in a nondeterministic build.

use std::path::Path;

use orrery_sim::exit::Exit;
use orrery_sim::scenario::{self, Scenario, Variant};

/// Which variants to run.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum VariantArg {
    /// Reproduces the real system, known flaws included.
    Faithful,
    /// orrery's design, which must fix each flaw.
    Hardened,
}

impl From<VariantArg> for Variant {
    fn from(v: VariantArg) -> Variant {
        match v {
            VariantArg::Faithful => Variant::Faithful,
            VariantArg::Hardened => Variant::Hardened,
        }
    }
}

/// A command that could not do its job: the message and the exit class.
#[derive(Debug)]
pub struct Fail(pub String, pub Exit);

impl Fail {
    /// A usage or harness error (exit 2).
    pub fn usage(message: impl Into<String>) -> Fail {
        Fail(message.into(), Exit::Usage)
    }
}

/// `A..B` (half-open) or `A..=B` (inclusive).
pub fn parse_seeds(text: &str) -> Result<std::ops::Range<u64>, String> {
    let bad = || format!("{text:?}: expected A..B (half-open) or A..=B (inclusive)");
    let number = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
    let range = match text.split_once("..=") {
        Some((a, b)) => number(a)?..number(b)?.checked_add(1).ok_or_else(bad)?,
        None => {
            let (a, b) = text.split_once("..").ok_or_else(bad)?;
            number(a)?..number(b)?
        }
    };
    if range.is_empty() {
        return Err(format!("{text:?} holds no seed"));
    }
    Ok(range)
}

/// The scenario at `path`, parsed, and its text (reports hash and quote it).
pub fn load(path: &Path) -> Result<(Scenario, String), Fail> {
    let scenario = scenario::load(path).map_err(|e| Fail::usage(e.to_string()))?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| Fail::usage(format!("{}: {e}", path.display())))?;
    Ok((scenario, text))
}

/// Child processes to run at once: `--jobs`, or one per core.
pub fn parallelism(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

/// Refuses to simulate in a binary built without `--cfg tokio_unstable`: without it turmoil
/// cannot seed tokio's RNG, so `select!` picks branches by a per-process random order and two
/// runs of one seed differ. A `RUSTFLAGS` in the environment replaces `.cargo/config.toml`'s
/// flags instead of adding to them, which is how such a binary gets built.
pub fn deterministic_build() -> Result<(), Fail> {
    if cfg!(tokio_unstable) {
        return Ok(());
    }
    Err(Fail::usage(
        "this binary was built without --cfg tokio_unstable, so its simulations are not \
         deterministic (tokio's select! order is random per process); a RUSTFLAGS variable \
         replaces .cargo/config.toml's flags: rebuild with RUSTFLAGS=\"--cfg tokio_unstable ...\"",
    ))
}

/// Writes a benchmark's record (pretty JSON) to `out`, creating its directory, and says so.
pub fn write_record(out: &std::path::Path, record: &serde_json::Value) -> Result<(), Fail> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Fail::usage(format!("{}: {e}", dir.display())))?;
    }
    let text = serde_json::to_string_pretty(record).expect("JSON values serialise") + "\n";
    std::fs::write(out, text).map_err(|e| Fail::usage(format!("{}: {e}", out.display())))?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
