//! Exit codes per result class, so CI and scripts can tell a flaw found from a broken
//! harness without parsing output (TigerBeetle's VOPR does the same).
//!
//! | code | meaning |
//! |---|---|
//! | 0 | the expected result |
//! | 1 | another mismatch (e.g. an unexpected pass) |
//! | 2 | usage or harness error (bad flag, bad scenario file, a host failed) |
//! | 3 | unexpected safety violation |
//! | 4 | unexpected liveness timeout |
//! | 5 | nondeterminism (two runs of one seed differed) |
//! | 6 | a declared reach condition was never reached |

use std::process::ExitCode;

use crate::scenario::Outcome;

/// One result class and its process exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exit {
    /// 0: the run (or every run) gave the result the scenario expects.
    Expected = 0,
    /// 1: a result other than the expected one that no other class covers (an unexpected pass).
    Mismatch = 1,
    /// 2: a usage error, an unreadable scenario, or a harness error.
    Usage = 2,
    /// 3: a safety invariant broke where the scenario did not expect it.
    Safety = 3,
    /// 4: a liveness invariant did not hold where the scenario did not expect it.
    Liveness = 4,
    /// 5: two runs of one seed produced different traces.
    Nondeterminism = 5,
    /// 6: a reach condition the scenario declares was never reached (exploration, issue 7).
    Unreached = 6,
}

impl Exit {
    /// The class of a run that produced `result` where `expected` was declared.
    pub fn of(result: Outcome, expected: Outcome) -> Exit {
        if result.meets(expected) {
            return Exit::Expected;
        }
        match result {
            Outcome::Pass => Exit::Mismatch,
            Outcome::SafetyViolation => Exit::Safety,
            Outcome::LivenessTimeout => Exit::Liveness,
            Outcome::Nondeterminism => Exit::Nondeterminism,
            Outcome::HarnessError => Exit::Usage,
            Outcome::Any => Exit::Mismatch, // never a result
        }
    }

    /// The numeric process exit code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The class of a run's numeric exit code, if it is one of ours.
    pub fn from_code(code: i32) -> Option<Exit> {
        [
            Exit::Expected,
            Exit::Mismatch,
            Exit::Usage,
            Exit::Safety,
            Exit::Liveness,
            Exit::Nondeterminism,
            Exit::Unreached,
        ]
        .into_iter()
        .find(|e| i32::from(e.code()) == code)
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_result_class_maps_to_its_documented_code() {
        use Outcome::*;
        assert_eq!(Exit::of(SafetyViolation, SafetyViolation).code(), 0);
        assert_eq!(Exit::of(Pass, Pass).code(), 0);
        assert_eq!(Exit::of(Pass, SafetyViolation).code(), 1);
        assert_eq!(Exit::of(HarnessError, Pass).code(), 2);
        assert_eq!(Exit::of(SafetyViolation, Pass).code(), 3);
        assert_eq!(Exit::of(LivenessTimeout, Pass).code(), 4);
        assert_eq!(Exit::of(LivenessTimeout, SafetyViolation).code(), 4);
        assert_eq!(Exit::of(Nondeterminism, Pass).code(), 5);
        assert_eq!(Exit::of(SafetyViolation, Any).code(), 0);
        assert_eq!(Exit::of(Pass, Any).code(), 0);
        assert_eq!(Exit::of(HarnessError, Any).code(), 2);
        assert_eq!(Exit::of(Nondeterminism, Any).code(), 5);
        assert_eq!(Exit::Unreached.code(), 6);
        for code in 0..=6 {
            assert_eq!(
                Exit::from_code(code).map(|e| i32::from(e.code())),
                Some(code)
            );
        }
        assert_eq!(Exit::from_code(7), None);
    }

    #[test]
    fn a_sweep_reports_the_highest_class_it_saw() {
        let seen = [Exit::Mismatch, Exit::Liveness, Exit::Safety];
        assert_eq!(seen.into_iter().max(), Some(Exit::Liveness));
    }
}
