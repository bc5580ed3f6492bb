//! PyTorch releases, and the rules each one's allocator follows.
//!
//! The allocator changed between releases in ways that change results
//! (spec section 12). Each change is a switch in [`Compat`]; a release
//! line maps to the switches its `libc10_cuda.so` was measured to follow
//! (the PyTorch harness in `crates/vramkit-pytorch` runs the real binaries).

use super::compat::Compat;
#[cfg(test)]
use super::compat::SizeTies;
use std::fmt;

/// A PyTorch release line, `major.minor`: what vramkit needs to know to
/// follow that release's allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct PytorchRelease {
    /// 2 for every release vramkit models.
    pub major: u32,
    /// The minor version.
    pub minor: u32,
}

impl PytorchRelease {
    /// The newest release whose rules vramkit knows.
    pub const NEWEST: PytorchRelease = PytorchRelease::new(2, 15);
    /// The oldest release whose rules vramkit knows (measured on its binary).
    pub const OLDEST: PytorchRelease = PytorchRelease::new(2, 4);
    /// The release whose rules [`Compat::default`] is: what vramkit follows
    /// when nothing says which release to follow.
    pub const DEFAULT_RULES: PytorchRelease = PytorchRelease::new(2, 11);

    /// `major.minor`.
    pub const fn new(major: u32, minor: u32) -> PytorchRelease {
        PytorchRelease { major, minor }
    }

    /// Reads `2.4`, `2.4.1`, `2.15.0+cu132`, `v2.10`.
    pub fn parse(text: &str) -> Result<PytorchRelease, String> {
        let t = text.trim().trim_start_matches('v');
        let core = t.split(['+', '-']).next().unwrap_or("");
        let mut parts = core.split('.');
        let number = |p: Option<&str>| p.and_then(|p| p.parse::<u32>().ok());
        match (number(parts.next()), number(parts.next())) {
            (Some(major), Some(minor)) => Ok(PytorchRelease { major, minor }),
            _ => Err(format!("{text:?} is not a PyTorch release; give major.minor, e.g. 2.4 or 2.15.0")),
        }
    }

    /// The allocator rules of this release. Releases older than
    /// [`OLDEST`](Self::OLDEST) get its rules (the closest measured);
    /// newer than [`NEWEST`](Self::NEWEST), the newest.
    pub fn compat(self) -> Compat {
        match (self.major, self.minor) {
            (0..=1, _) | (2, 0..=5) => Compat::R24,
            (2, 6..=9) => Compat::V2_8,
            (2, 10..=11) => Compat::R26,
            (2, 12) => Compat::V2_12,
            _ => Compat::V2_13,
        }
    }

    /// The wording of this release's out-of-memory message.
    pub fn message_style(self) -> crate::oom_message::MessageStyle {
        use crate::oom_message::MessageStyle;
        match (self.major, self.minor) {
            (0, _) | (1, 0..=3) => MessageStyle::V1_0,
            (1, 4..=9) => MessageStyle::V1_4,
            (1, _) | (2, 0) => MessageStyle::V1_10,
            (2, 1) => MessageStyle::V2_1,
            (2, 2) => MessageStyle::V2_2,
            (2, 3) => MessageStyle::V2_3,
            (2, 4..=5) => MessageStyle::V2_4,
            (2, 6..=9) => MessageStyle::V2_6,
            (2, 10) => MessageStyle::V2_10,
            (2, 11..=14) => MessageStyle::V2_11,
            _ => MessageStyle::V2_15,
        }
    }

    /// What sets this release's rules apart, in a few words, for reports.
    pub fn rules(self) -> &'static str {
        match (self.major, self.minor) {
            (0..=1, _) | (2, 0..=5) => "equal-size free blocks by address, a fixed 20 MiB oversize tolerance",
            (2, 6..=9) => "equal-size free blocks by address, max_non_split_rounding_mb",
            (2, 10..=11) => "equal-size free blocks by address, large_segment_size_mb",
            (2, 12) => "equal-size free blocks by block age",
            _ => "equal-size free blocks by segment age, then address",
        }
    }
}

impl Default for PytorchRelease {
    fn default() -> Self {
        PytorchRelease::NEWEST
    }
}

impl fmt::Display for PytorchRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for PytorchRelease {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        PytorchRelease::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_and_order() {
        assert_eq!(PytorchRelease::parse("2.4").unwrap(), PytorchRelease::new(2, 4));
        assert_eq!(PytorchRelease::parse("2.15.0+cu132").unwrap(), PytorchRelease::new(2, 15));
        assert_eq!("v2.10.1".parse::<PytorchRelease>().unwrap(), PytorchRelease::new(2, 10));
        assert!(PytorchRelease::parse("two").unwrap_err().contains("e.g. 2.4"));
        assert!(PytorchRelease::new(2, 9) < PytorchRelease::new(2, 13));
        assert_eq!(PytorchRelease::new(2, 13).to_string(), "2.13");
    }

    #[test]
    fn each_line_has_its_rules() {
        assert_eq!(PytorchRelease::new(2, 4).compat(), Compat::R24);
        assert_eq!(PytorchRelease::new(2, 8).compat(), Compat::V2_8);
        assert_eq!(PytorchRelease::new(2, 11).compat(), Compat::R26);
        assert_eq!(PytorchRelease::new(2, 12).compat().size_ties, SizeTies::BlockAge);
        assert_eq!(PytorchRelease::new(2, 13).compat().size_ties, SizeTies::SegmentAge);
        assert_eq!(PytorchRelease::NEWEST.compat().size_ties, SizeTies::SegmentAge);
        assert_eq!(PytorchRelease::DEFAULT_RULES.compat(), Compat::default());
    }
}
