//! Errors of the settings parser and of [`AllocatorConfig::validate`](super::AllocatorConfig::validate).
//!
//! Every message is one line that names the key, the value as written and
//! what would be accepted, then quotes PyTorch's own message where PyTorch
//! has one, so a user can search for either.

use std::fmt;

/// A settings string or value PyTorch would refuse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key's value is outside what PyTorch accepts.
    #[error("{key}:{value} is invalid: must be {allowed}{}", PyTorchSays(.pytorch_message.as_deref()))]
    InvalidValue {
        /// The key, as PyTorch spells it (an alias is reported under its main name).
        key: String,
        /// The value as written (whitespace removed, as PyTorch removes it).
        value: String,
        /// What is allowed, phrased to follow "must be".
        allowed: String,
        /// PyTorch's message for the same mistake, where it has one.
        pytorch_message: Option<String>,
    },
    /// A key that no PyTorch of the configured generation knows.
    #[error(
        "unknown key '{key}' in PYTORCH_CUDA_ALLOC_CONF{}{}",
        UnknownKeyHint::new(.suggestion, .available_with, .known),
        PyTorchSays(Some(pytorch_message))
    )]
    UnknownKey {
        /// The key as written.
        key: String,
        /// The known key closest to it, when one is close enough to be a typo.
        suggestion: Option<String>,
        /// Every key accepted under the configured [`Compat`](super::Compat), aliases included.
        known: Vec<&'static str>,
        /// Set when the key exists in another PyTorch generation: the
        /// [`Compat`](super::Compat) switch that accepts it.
        available_with: Option<String>,
        /// PyTorch's message.
        pytorch_message: String,
    },
    /// The string is not a comma-separated list of `key:value` pairs.
    #[error(
        "syntax error in PYTORCH_CUDA_ALLOC_CONF {input:?} at character {position}: expected {expected}, found {found}; \
         write comma-separated key:value pairs, lists as [k:v,...]{}",
        PyTorchSays(.pytorch_message.as_deref())
    )]
    Syntax {
        /// The whole settings string.
        input: String,
        /// 0-based index, in characters, of the first character that does not fit.
        position: usize,
        /// What the grammar needed there.
        expected: String,
        /// What is there instead (`end of input` at the end).
        found: String,
        /// PyTorch's message, where one exists.
        pytorch_message: Option<String>,
    },
    /// A key without a value (`key`, `key:` or `key:,`).
    #[error("{key} has no value: write {key}:<value> or remove it{}", PyTorchSays(.pytorch_message.as_deref()))]
    MissingValue {
        /// The key.
        key: String,
        /// PyTorch's message, where one exists.
        pytorch_message: Option<String>,
    },
}

/// ` (PyTorch: "...")`, or nothing.
struct PyTorchSays<'a>(Option<&'a str>);

impl fmt::Display for PyTorchSays<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(message) => write!(f, " (PyTorch: \"{}\")", message.trim_end()),
            None => Ok(()),
        }
    }
}

struct UnknownKeyHint<'a> {
    suggestion: Option<&'a str>,
    available_with: Option<&'a str>,
    known: &'a [&'static str],
}

impl<'a> UnknownKeyHint<'a> {
    fn new(
        suggestion: &'a Option<String>,
        available_with: &'a Option<String>,
        known: &'a [&'static str],
    ) -> Self {
        UnknownKeyHint { suggestion: suggestion.as_deref(), available_with: available_with.as_deref(), known }
    }
}

impl fmt::Display for UnknownKeyHint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(switch) = self.available_with {
            return write!(
                f,
                " for this PyTorch generation: it needs {switch}; remove it or configure a newer Compat"
            );
        }
        if let Some(suggestion) = self.suggestion {
            return write!(f, ": did you mean '{suggestion}'?");
        }
        write!(f, ": remove it; the known keys are {}", self.known.join(", "))
    }
}

/// The candidate closest to `key` by edit distance, if it is close enough to
/// be a typo of it (or `key` starts with it, as in `expandable_segmentsTrue`
/// where the `:` was lost).
pub(super) fn closest<'a>(key: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let key_lower = key.to_ascii_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for &candidate in candidates {
        let distance =
            if key_lower.starts_with(candidate) { 0 } else { edit_distance(&key_lower, candidate) };
        let near_enough = distance <= (candidate.len() / 4).max(2);
        if near_enough && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// Levenshtein distance over bytes (keys are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.as_bytes().iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("abc", "abd"), 1);
        assert_eq!(edit_distance("abc", "ac"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn closest_finds_typos_but_not_strangers() {
        let keys = ["max_split_size_mb", "expandable_segments", "backend"];
        assert_eq!(closest("max_split_size", &keys), Some("max_split_size_mb"));
        assert_eq!(closest("Expandable_Segments", &keys), Some("expandable_segments"));
        assert_eq!(closest("expandable_segmentsTrue", &keys), Some("expandable_segments"));
        assert_eq!(closest("backnd", &keys), Some("backend"));
        assert_eq!(closest("foo", &keys), None);
    }
}
