//! The AFL++ driver (`make fuzz` builds it with `cargo afl`):
//! - `orrery-fuzz TARGET`: runs the target on AFL's inputs in persistent mode;
//! - `orrery-fuzz list`: the targets' names, one per line;
//! - `orrery-fuzz report OUT DIR WHEN MACHINE TARGET…`: the figures of AFL's output folder
//!   `OUT` into `DIR/README.md` and `DIR/fuzz.json`; exits 1 if a target crashed or hung.

use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("list") => {
            for target in orrery_fuzz::TARGETS {
                println!("{}", target.name);
            }
        }
        Some("report") if args.len() >= 5 => std::process::exit(report(&args[1..])),
        Some(name) if orrery_fuzz::target(name).is_some() => {
            let run = orrery_fuzz::target(name).map(|t| t.run).unwrap_or(|_| {});
            afl::fuzz!(|data: &[u8]| {
                run(data);
            });
        }
        _ => {
            let names: Vec<&str> = orrery_fuzz::TARGETS.iter().map(|t| t.name).collect();
            eprintln!(
                "usage: orrery-fuzz TARGET | list | report OUT DIR WHEN MACHINE TARGET…\ntargets: {}",
                names.join(", ")
            );
            std::process::exit(2);
        }
    }
}

fn report(args: &[String]) -> i32 {
    let (out, dir, when, machine) = (Path::new(&args[0]), Path::new(&args[1]), &args[2], &args[3]);
    let mut runs = Vec::new();
    for target in &args[4..] {
        match orrery_fuzz::report::read(out, target) {
            Ok(stats) => runs.push(stats),
            Err(e) => {
                eprintln!("fuzz report: {e}");
                return 2;
            }
        }
    }
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| {
            std::fs::write(
                dir.join("README.md"),
                orrery_fuzz::report::markdown(&runs, when, machine),
            )
        })
        .and_then(|()| {
            let json = orrery_fuzz::report::json(&runs, when);
            std::fs::write(dir.join("fuzz.json"), format!("{json:#}\n"))
        });
    if let Err(e) = written {
        eprintln!("fuzz report: {}: {e}", dir.display());
        return 2;
    }
    print!("{}", orrery_fuzz::report::markdown(&runs, when, machine));
    i32::from(
        runs.iter()
            .any(|s| !s.crashes.is_empty() || !s.hangs.is_empty()),
    )
}
