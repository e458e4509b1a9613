//! An executor's boot: reconcile orphans, and resume them if told to.
//!
//! A run whose executor died is found by its expired executor lease and
//! marked `orphaned` with the message `run orphaned: executor lease expired`.
//! With `LEASEHOLD_RESUME_ON_BOOT=true` a starting executor also claims each
//! orphan (a compare-and-set that raises its fence) and resumes it from its
//! last snapshot; `leasehold runs resume ID` does the same for one run, on
//! demand.
//!
//! Resuming on boot is off by default. A process that starts — after a crash
//! loop, a deploy, or on a developer's machine with an old data directory —
//! would otherwise silently pick up runs that may be hours old, spend model
//! calls on them and call tools whose world has moved on; and where several
//! executors share a database, operators usually want to choose which ones
//! resume work. Reconciliation itself (marking orphans) is always on: it only
//! tells the truth about runs nobody owns.

use leasehold_actors::engine::{Engine, EngineError};
use leasehold_actors::run::RunHandle;

/// The environment variable that turns resume on boot on.
pub const RESUME_ON_BOOT: &str = "LEASEHOLD_RESUME_ON_BOOT";

/// A value of `LEASEHOLD_RESUME_ON_BOOT` that is not a boolean.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{RESUME_ON_BOOT}: expected true or false (or 1, 0, yes, no), got {0:?}")]
pub struct BadFlag(pub String);

/// Reads `LEASEHOLD_RESUME_ON_BOOT` (default false).
pub fn resume_on_boot_from_env() -> Result<bool, BadFlag> {
    match std::env::var(RESUME_ON_BOOT) {
        Err(_) => Ok(false),
        Ok(value) => parse_flag(&value),
    }
}

/// Parses a boolean flag the way every `LEASEHOLD_*` flag is parsed.
pub fn parse_flag(value: &str) -> Result<bool, BadFlag> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" | "" => Ok(false),
        _ => Err(BadFlag(value.to_owned())),
    }
}

/// What a boot did.
#[derive(Debug, Default)]
pub struct Boot {
    /// Runs found orphaned (and so marked).
    pub orphaned: Vec<String>,
    /// Runs this executor claimed and resumed.
    pub resumed: Vec<RunHandle>,
}

/// Marks orphans; with `resume_on_boot`, claims and resumes them.
pub async fn boot(engine: &Engine, resume_on_boot: bool) -> Result<Boot, EngineError> {
    let orphaned = engine.reconcile_orphans().await?;
    let resumed = if resume_on_boot {
        engine.resume_orphans().await?
    } else {
        Vec::new()
    };
    Ok(Boot { orphaned, resumed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_on_boot_flag_parses_and_refuses_nonsense() {
        assert_eq!(parse_flag("true"), Ok(true));
        assert_eq!(parse_flag(" YES "), Ok(true));
        assert_eq!(parse_flag("0"), Ok(false));
        assert_eq!(parse_flag(""), Ok(false));
        let error = parse_flag("sometimes").expect_err("refused");
        assert!(
            error.to_string().contains("LEASEHOLD_RESUME_ON_BOOT"),
            "{error}"
        );
        assert!(error.to_string().contains("sometimes"), "{error}");
    }
}
