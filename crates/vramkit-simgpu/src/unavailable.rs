//! "Cannot here" versus "failed": what the test bed does when this machine
//! cannot build or fetch something.

/// Set to `1` to turn "the simulated GPU cannot be built here" from a skip
/// into a failure (CI sets it).
pub const REQUIRE_ENV: &str = "VRAMKIT_REQUIRE_SIMGPU";

/// Why something could not be had: this machine cannot (not Linux, no
/// compiler, no python or pip, no network: a skip), or it failed.
#[derive(Debug)]
pub(crate) enum Unavailable {
    Here(String),
    Failed(String),
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::Here(why) | Unavailable::Failed(why) => f.write_str(why),
        }
    }
}

impl From<String> for Unavailable {
    fn from(e: String) -> Self {
        Unavailable::Failed(e)
    }
}

/// `Ok(Some)` on success; on "cannot here", prints why and gives `Ok(None)`
/// (a skip) unless [`REQUIRE_ENV`] is `1`; `what` names the attempt in
/// messages ("building ...").
pub(crate) fn settle<T>(what: &str, attempt: Result<T, Unavailable>) -> Result<Option<T>, String> {
    match attempt {
        Ok(value) => Ok(Some(value)),
        Err(Unavailable::Failed(e)) => Err(format!("{what}: {e}")),
        Err(Unavailable::Here(why)) => {
            if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
                Err(format!("{what} is not possible here ({why}), and {REQUIRE_ENV}=1 requires it"))
            } else {
                eprintln!("skipped: {what} is not possible here: {why}");
                Ok(None)
            }
        }
    }
}
