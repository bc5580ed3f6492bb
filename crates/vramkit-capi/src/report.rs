//! What the C entry points say on stderr, and the misuse counter.
//!
//! The C ABI has no error channel, so each failure prints one line (an OOM
//! prints PyTorch's message and vramkit's diagnosis). Printing stops after
//! a budget so a loop of mistakes cannot flood the log; counting never stops.

use crate::Error;
use std::sync::atomic::{AtomicU64, Ordering};

/// Lines of each kind printed before the rest are only counted.
const PRINTED_LINES: u64 = 100;

static MISUSE_COUNT: AtomicU64 = AtomicU64::new(0);
static MISUSE_PRINTED: AtomicU64 = AtomicU64::new(0);
static FAILURES_PRINTED: AtomicU64 = AtomicU64::new(0);

/// Boundary misuse reported since the library was loaded.
pub(crate) fn misuse_count() -> u64 {
    MISUSE_COUNT.load(Ordering::Relaxed)
}

fn print_within_budget(printed: &AtomicU64, kind: &str, text: &str) {
    let n = printed.fetch_add(1, Ordering::Relaxed) + 1;
    if n <= PRINTED_LINES {
        eprintln!("{text}");
        if n == PRINTED_LINES {
            eprintln!("vramkit: {PRINTED_LINES} {kind} printed; further ones are counted, not printed");
        }
    }
}

/// Reports an error of `call`: misuse is counted; every error prints one
/// line (an OOM prints its message and diagnosis).
pub(crate) fn error(call: &str, error: &Error) {
    if error.is_misuse() {
        MISUSE_COUNT.fetch_add(1, Ordering::Relaxed);
        print_within_budget(&MISUSE_PRINTED, "boundary errors", &format!("vramkit: {call}: {error}"));
    } else {
        print_within_budget(&FAILURES_PRINTED, "failures", &format!("vramkit: {call}: {error}"));
    }
}
