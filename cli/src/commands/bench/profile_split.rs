//! `orrery profile-split`: where a profiled seed's time goes — the wire between hosts (JSON
//! in and out, HTTP, gzip, the simulated network and the async runtime under them) or the
//! components' own logic (issue 19). The split bounds what any optimisation of the
//! components can gain while the traces, and so the messages, stay as they are: with the
//! components' logic free, a seed still costs its wire.
//!
//! It reads `perf script -F ip,sym` text (what `make profile` records): one sample is a
//! block of frames, leaf first, blocks separated by blank lines. Each sample goes to the
//! leaf-most frame it recognises: a serde_json decoder frame called from the simulated Argo
//! CD counts as JSON decoding, an `IndexMap` lookup called from it (a library it does not
//! recognise) counts as the simulated Argo CD's own logic.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::BufRead;

/// What a sample was doing, by the leaf-most frame recognised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// serde_json decoding and the `Deserialize` impls it drives (ours included).
    JsonDecode,
    /// serde_json encoding and the `Serialize` impls it drives.
    JsonEncode,
    /// hyper, hyper-util, http and httparse.
    Http,
    /// zlib-rs and flate2: gzip of events and their inflation on the platform.
    Gzip,
    /// turmoil: the simulated network and its hosts.
    Network,
    /// tokio, futures and async-stream: tasks, timers and channels.
    Runtime,
    /// kube-rs's client and watcher machinery (their JSON is counted as JSON).
    Kube,
    /// The `bytes` crate's buffers.
    Bytes,
    /// orrery's environment seam (`orrery_system::env`, `orrery_sim::env`): HTTP serving,
    /// connectors, the kube glue.
    EnvSeam,
    /// The simulated world's own logic (`orrery_sim::world`: API server, Argo CD, Git,
    /// workload, …).
    World,
    /// The runtime's and the control plane's own logic (`orrery_system`, outside `env`).
    System,
    /// The harness (`orrery_sim` outside `world` and `env`: runner, trace, checkers,
    /// scenario parsing).
    Harness,
    /// No recognised frame (libc, the kernel, the allocator alone).
    Unrecognised,
}

impl Class {
    /// Every class, in the order the table prints them.
    pub const ALL: [Class; 13] = [
        Class::JsonDecode,
        Class::JsonEncode,
        Class::Http,
        Class::Gzip,
        Class::Network,
        Class::Runtime,
        Class::Kube,
        Class::Bytes,
        Class::EnvSeam,
        Class::World,
        Class::System,
        Class::Harness,
        Class::Unrecognised,
    ];

    /// The table's label.
    pub fn label(self) -> &'static str {
        match self {
            Class::JsonDecode => "JSON decoding (serde_json)",
            Class::JsonEncode => "JSON encoding (serde_json)",
            Class::Http => "HTTP (hyper, http, httparse)",
            Class::Gzip => "gzip (zlib-rs, flate2)",
            Class::Network => "simulated network (turmoil)",
            Class::Runtime => "async runtime (tokio, futures)",
            Class::Kube => "kube-rs client and watcher",
            Class::Bytes => "buffers (bytes)",
            Class::EnvSeam => "environment seam (orrery env)",
            Class::World => "simulated world (orrery_sim::world)",
            Class::System => "runtime and platform (orrery_system)",
            Class::Harness => "harness (runner, trace, checkers)",
            Class::Unrecognised => "unrecognised",
        }
    }

    /// Whether this is the wire and the runtime under it, rather than a component's logic.
    pub fn is_wire(self) -> bool {
        !matches!(
            self,
            Class::World | Class::System | Class::Harness | Class::Unrecognised
        )
    }
}

/// Library path prefixes and what a frame under them is doing. Checked in order; a frame
/// that matches none (core, alloc, std, indexmap, hashbrown, the allocator, libc) says
/// nothing, and the sample goes to its caller.
const LIBRARIES: &[(&str, Class)] = &[
    ("serde_json::de", Class::JsonDecode),
    ("serde_json::read", Class::JsonDecode),
    ("serde_json::value::de", Class::JsonDecode),
    ("serde_json::raw", Class::JsonDecode),
    ("serde_json::from_", Class::JsonDecode),
    ("serde_core::de", Class::JsonDecode),
    ("serde_json::ser", Class::JsonEncode),
    ("serde_json::value::ser", Class::JsonEncode),
    ("serde_json::to_", Class::JsonEncode),
    ("serde_core::ser", Class::JsonEncode),
    ("zlib_rs::", Class::Gzip),
    ("flate2::", Class::Gzip),
    ("hyper::", Class::Http),
    ("hyper_util::", Class::Http),
    ("httparse::", Class::Http),
    ("http::", Class::Http),
    ("http_body", Class::Http),
    ("turmoil::", Class::Network),
    ("tokio::", Class::Runtime),
    ("tokio_util::", Class::Runtime),
    ("futures_util::", Class::Runtime),
    ("futures_core::", Class::Runtime),
    ("async_stream::", Class::Runtime),
    ("kube_client::", Class::Kube),
    ("kube_runtime::", Class::Kube),
    ("kube_core::", Class::Kube),
    ("bytes::", Class::Bytes),
];

/// What one frame's symbol says, if anything.
pub fn classify_frame(symbol: &str) -> Option<Class> {
    // `<T as Trait>::method`: a serde impl is decoding or encoding whatever type it is for
    // (orrery's derived impls included); otherwise the frame belongs to `T`.
    let path = match symbol.strip_prefix('<') {
        Some(rest) => {
            if let Some((_, tail)) = rest.split_once(" as ") {
                if tail.starts_with("serde_core::de") || tail.starts_with("serde::de") {
                    return Some(Class::JsonDecode);
                }
                if tail.starts_with("serde_core::ser") || tail.starts_with("serde::ser") {
                    return Some(Class::JsonEncode);
                }
            }
            rest.trim_start_matches("&mut ").trim_start_matches('&')
        }
        None => symbol,
    };
    if path.contains("::<impl serde_core::de::") {
        return Some(Class::JsonDecode);
    }
    if path.contains("::<impl serde_core::ser::") {
        return Some(Class::JsonEncode);
    }
    if let Some(ours) = path
        .strip_prefix("orrery_sim::")
        .map(|rest| (true, rest))
        .or_else(|| {
            path.strip_prefix("orrery_system::")
                .map(|rest| (false, rest))
        })
    {
        return Some(match ours {
            (_, rest) if rest.starts_with("env::") => Class::EnvSeam,
            (true, rest) if rest.starts_with("world::") => Class::World,
            (true, _) => Class::Harness,
            (false, _) => Class::System,
        });
    }
    LIBRARIES
        .iter()
        .find(|(prefix, _)| path.starts_with(prefix))
        .map(|(_, class)| *class)
}

/// A sample's class: its leaf-most recognised frame's, else [`Class::Unrecognised`].
pub fn classify<'a>(frames: impl IntoIterator<Item = &'a str>) -> Class {
    frames
        .into_iter()
        .find_map(classify_frame)
        .unwrap_or(Class::Unrecognised)
}

/// The symbol of one `perf script -F ip,sym` line (`    55d0c0ffee12 hyper::proto::…`):
/// what follows the address; the whole trimmed line if it has none.
fn symbol(line: &str) -> &str {
    let line = line.trim();
    match line.split_once(char::is_whitespace) {
        Some((ip, rest)) if ip.chars().all(|c| c.is_ascii_hexdigit()) => rest.trim(),
        _ => line,
    }
}

/// How many samples went where.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Split {
    /// Samples read.
    pub samples: u64,
    /// Samples per class.
    pub counts: BTreeMap<Class, u64>,
}

impl Split {
    /// The share (0–1) of the samples in `class`.
    pub fn share(&self, class: Class) -> f64 {
        self.counts.get(&class).copied().unwrap_or(0) as f64 / self.samples.max(1) as f64
    }

    /// The share of the samples in the wire classes (`wire`) or in the others.
    pub fn side_share(&self, wire: bool) -> f64 {
        Class::ALL
            .iter()
            .filter(|c| c.is_wire() == wire)
            .map(|c| self.share(*c))
            .sum()
    }
}

/// Why a split could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    /// The input could not be read.
    #[error("reading the profile: {0}")]
    Read(#[from] std::io::Error),
    /// The input held no sample.
    #[error("no samples in the input: expected the text of `perf script -F ip,sym` (frames one a line, samples separated by blank lines)")]
    Empty,
}

/// Reads `perf script -F ip,sym` text and counts where its samples went.
pub fn split(input: impl BufRead) -> Result<Split, SplitError> {
    let mut result = Split::default();
    let mut frames: Vec<String> = Vec::new();
    let mut flush = |frames: &mut Vec<String>| {
        if !frames.is_empty() {
            let class = classify(frames.iter().map(|f| symbol(f)));
            *result.counts.entry(class).or_default() += 1;
            result.samples += 1;
            frames.clear();
        }
    };
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            flush(&mut frames);
        } else {
            frames.push(line);
        }
    }
    flush(&mut frames);
    if result.samples == 0 {
        return Err(SplitError::Empty);
    }
    Ok(result)
}

/// The split as a table; with the run's wall seconds, each share as seconds too.
pub fn table(split: &Split, wall_seconds: Option<f64>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "where {} samples went (each to its leaf-most recognised frame)",
        split.samples
    );
    let row = |out: &mut String, label: &str, share: f64| {
        let _ = write!(out, "  {label:<40} {:>5.1} %", 100.0 * share);
        if let Some(wall) = wall_seconds {
            let _ = write!(out, "  {:>7.2} s", wall * share);
        }
        out.push('\n');
    };
    for (heading, wire) in [
        ("the wire and the runtime under it:", true),
        ("the components' own logic:", false),
    ] {
        let _ = writeln!(out, "{heading}");
        for class in Class::ALL.iter().filter(|c| c.is_wire() == wire) {
            row(&mut out, class.label(), split.share(*class));
        }
        row(&mut out, "subtotal", split.side_share(wire));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_classified_by_their_crate_and_serde_impls_by_their_trait() {
        let cases = [
            ("serde_json::read::SliceRead::skip_to_escape", Some(Class::JsonDecode)),
            (
                "<&mut serde_json::de::Deserializer<R> as serde_core::de::Deserializer>::deserialize_any",
                Some(Class::JsonDecode),
            ),
            (
                "<orrery_system::core::event::Source as serde_core::de::Deserialize>::deserialize",
                Some(Class::JsonDecode),
            ),
            (
                "orrery_system::core::event::_::<impl serde_core::ser::Serialize for orrery_system::core::event::EventPayload>::serialize",
                Some(Class::JsonEncode),
            ),
            ("serde_json::ser::format_escaped_str", Some(Class::JsonEncode)),
            ("zlib_rs::deflate::algorithm::quick::deflate_quick", Some(Class::Gzip)),
            (
                "<hyper::proto::h1::role::Client as hyper::proto::h1::Http1Transaction>::parse",
                Some(Class::Http),
            ),
            ("turmoil::host::StreamSocket::buffer", Some(Class::Network)),
            ("tokio::runtime::task::raw::poll", Some(Class::Runtime)),
            (
                "<futures_util::future::future::Map<Fut,F> as core::future::future::Future>::poll",
                Some(Class::Runtime),
            ),
            ("kube_runtime::watcher::step_trampolined::{{closure}}", Some(Class::Kube)),
            ("bytes::bytes_mut::BytesMut::reserve_inner", Some(Class::Bytes)),
            ("orrery_system::env::http::serve::{{closure}}", Some(Class::EnvSeam)),
            ("orrery_sim::env::SimEnv::connect", Some(Class::EnvSeam)),
            ("orrery_sim::world::argocd::controller::Inputs::of", Some(Class::World)),
            (
                "orrery_system::runtime::app_reporter::process::encode_event",
                Some(Class::System),
            ),
            ("orrery_sim::harness::runner::run::{{closure}}", Some(Class::Harness)),
            // Says nothing: the sample goes to the caller.
            ("indexmap::map::IndexMap<K,V,S>::get_index_of", None),
            ("<core::hash::sip::Hasher<S> as core::hash::Hasher>::write", None),
            ("__memcmp_evex_movbe", None),
            ("_mi_page_malloc_zero", None),
            ("[unknown]", None),
        ];
        for (symbol, class) in cases {
            assert_eq!(classify_frame(symbol), class, "{symbol}");
        }
    }

    #[test]
    fn a_sample_goes_to_its_leaf_most_recognised_frame() {
        // A lookup in a JSON object called from the simulated Argo CD is its logic…
        let lookup = [
            "__memcmp_evex_movbe",
            "indexmap::map::IndexMap<K,V,S>::get_index_of",
            "orrery_sim::world::argocd::controller::Inputs::of",
            "tokio::runtime::task::raw::poll",
        ];
        assert_eq!(classify(lookup), Class::World);
        // …and an allocation made while decoding an answer is decoding.
        let decode = [
            "_mi_page_malloc_zero",
            "serde_json::de::Deserializer<R>::parse_object",
            "orrery_system::runtime::app_reporter::argocd::ArgoCd::get::{{closure}}",
        ];
        assert_eq!(classify(decode), Class::JsonDecode);
        assert_eq!(
            classify(["__memmove_avx512_unaligned_erms"]),
            Class::Unrecognised
        );
    }

    #[test]
    fn perf_script_text_is_split_and_tabled() {
        let text = "\
\t    55d0c0ffee10 __memcmp_evex_movbe
\t    55d0c0ffee11 orrery_sim::world::argocd::controller::Inputs::of

\t    55d0c0ffee12 serde_json::read::SliceRead::skip_to_escape
\t    55d0c0ffee13 orrery_system::platform::events::decode

\t    55d0c0ffee14 serde_json::read::SliceRead::skip_to_escape
\t    55d0c0ffee15 kube_runtime::watcher::step_trampolined::{{closure}}


\t    55d0c0ffee16 turmoil::sim::Sim::step
";
        let split = split(text.as_bytes()).unwrap();
        assert_eq!(split.samples, 4);
        assert_eq!(split.counts[&Class::JsonDecode], 2);
        assert_eq!(split.counts[&Class::World], 1);
        assert_eq!(split.counts[&Class::Network], 1);
        assert!((split.side_share(true) - 0.75).abs() < 1e-9);
        assert!((split.side_share(false) - 0.25).abs() < 1e-9);
        let table = table(&split, Some(8.0));
        let row = |label: &str, percent: f64, seconds: f64| {
            format!("  {label:<40} {percent:>5.1} %  {seconds:>7.2} s\n")
        };
        assert!(
            table.contains(&row("JSON decoding (serde_json)", 50.0, 4.0)),
            "{table}"
        );
        assert!(
            table.contains(&row("simulated world (orrery_sim::world)", 25.0, 2.0)),
            "{table}"
        );
        // Two subtotals: the wire's 75 %, the components' 25 %.
        assert!(table.contains(&row("subtotal", 75.0, 6.0)), "{table}");
        assert!(table.contains(&row("subtotal", 25.0, 2.0)), "{table}");
        // Without wall seconds, shares only.
        assert!(!super::table(&split, None).contains(" s\n"));
    }

    #[test]
    fn input_without_samples_is_an_error_that_says_what_was_expected() {
        let error = split("\n\n  \n".as_bytes()).unwrap_err();
        assert!(
            error.to_string().contains("perf script -F ip,sym"),
            "{error}"
        );
    }
}
