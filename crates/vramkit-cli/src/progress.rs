//! Progress bars: drawn on a terminal's stderr, silent when stderr is piped
//! or redirected, so scripts and tests see only the output they asked for.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

fn target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// A bar for `len` steps of known count (replays of a tune).
pub fn bar(len: u64, message: &str) -> ProgressBar {
    let style = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed}, {eta} left)")
        .expect("valid template")
        .progress_chars("=> ");
    ProgressBar::with_draw_target(Some(len), target()).with_style(style).with_message(message.to_string())
}

/// A spinner for work of unknown length (parsing a file, one replay).
pub fn spinner(message: &str) -> ProgressBar {
    let style = ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("valid template");
    let bar = ProgressBar::with_draw_target(None, target()).with_style(style).with_message(message.to_string());
    if !bar.is_hidden() {
        bar.enable_steady_tick(Duration::from_millis(100));
    }
    bar
}
