//! Variants: the real system's design, flaws included, and ours.

use serde::{Deserialize, Serialize};

/// Which design of a component runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// Reproduces the real system, known flaws included.
    Faithful,
    /// orrery's design, which must fix each flaw.
    Hardened,
}

impl Variant {
    /// Both variants, in report order.
    pub const ALL: [Variant; 2] = [Variant::Faithful, Variant::Hardened];

    /// The lowercase name used on command lines and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Faithful => "faithful",
            Variant::Hardened => "hardened",
        }
    }

    /// Parses a variant name.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "faithful" => Ok(Variant::Faithful),
            "hardened" => Ok(Variant::Hardened),
            other => Err(format!(
                "unknown variant {other:?}: expected \"faithful\" or \"hardened\""
            )),
        }
    }
}
