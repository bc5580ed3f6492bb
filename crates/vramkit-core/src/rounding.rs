//! Size rounding and pool choice (spec section 1).
//!
//! Every request is rounded before it meets a pool: up to 512 bytes, or, when
//! `roundup_power2_divisions` is set for its size class, up to a fraction of
//! the power of two below it. The rounded size picks the pool (small for
//! <= 1 MiB) and the size of a new segment.

/// Every request is rounded up to a multiple of this (`kMinBlockSize`).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest rounded size served by the small pool (`kSmallSize`).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Segment size of the small pool (`kSmallBuffer`); small expandable page size.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Default large segment size for 1-10 MiB requests (`kLargeBuffer`).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Rounded sizes below this get a `large_segment_size` segment (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Larger requests get a segment rounded up to this (`kRoundLarge`).
pub const ROUND_LARGE: u64 = 2 << 20;
/// Entries in the `roundup_power2_divisions` table.
pub const ROUNDUP_INTERVALS: usize = 16;
/// Requests of this size or more fail at once ("more than 1EB").
pub const ONE_EXABYTE: u64 = 1 << 60;
/// A remainder larger than this is split off a large-pool block.
pub const LARGE_SPLIT_REMAINDER: u64 = SMALL_SIZE;

/// Which of a device's two pool kinds a block belongs to.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolKind {
    /// Rounded sizes up to 1 MiB, carved from 2 MiB segments.
    Small,
    /// Everything above 1 MiB.
    Large,
}

impl PoolKind {
    /// The pool a rounded size is served from (spec 1.4: `<= 1 MiB` is small).
    #[inline]
    pub const fn for_size(rounded_bytes: u64) -> PoolKind {
        if rounded_bytes <= SMALL_SIZE {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }

    /// PyTorch's name: `"small"` or `"large"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        }
    }
}

/// The index of `size` in the 16-entry division table (spec 1.3): 0 for
/// sizes below 2 MiB, `floor(log2(size)) - 20` above, clamped to 15.
#[inline]
pub const fn division_index(size: u64) -> usize {
    if size == 0 {
        return 0;
    }
    let log2 = 63 - size.leading_zeros() as usize;
    let index = log2.saturating_sub(20);
    if index > ROUNDUP_INTERVALS - 1 {
        ROUNDUP_INTERVALS - 1
    } else {
        index
    }
}

/// `round_size` (spec 1.2): the bytes a request of `size` occupies.
#[inline]
pub fn round_size(size: u64, divisions: &[u64; ROUNDUP_INTERVALS]) -> u64 {
    if size < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    let d = divisions[division_index(size)];
    if d > 1 && size > MIN_BLOCK_SIZE * d {
        round_up_power2_division(size, d)
    } else {
        size.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
    }
}

/// Rounds `size` up to a multiple of `(largest power of two <= size) >> floor(log2(d))`.
#[inline]
fn round_up_power2_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor_pow2 = 1u64 << (63 - size.leading_zeros());
    let step = floor_pow2 >> (63 - divisions.leading_zeros());
    if step == 0 {
        return 2 * floor_pow2;
    }
    size.div_ceil(step) * step
}

/// `get_allocation_size` (spec 1.5): the size of a new segment for a rounded request.
#[inline]
pub const fn get_allocation_size(rounded: u64, large_segment_size: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        large_segment_size
    } else {
        rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: [u64; 16] = [0; 16];
    const MIB: u64 = 1 << 20;

    fn all(d: u64) -> [u64; 16] {
        [d; 16]
    }

    #[test]
    fn small_sizes_round_to_512() {
        assert_eq!(round_size(1, &NONE), 512);
        assert_eq!(round_size(511, &NONE), 512);
        assert_eq!(round_size(512, &NONE), 512);
        assert_eq!(round_size(513, &NONE), 1024);
        assert_eq!(round_size(1000, &NONE), 1024);
        assert_eq!(round_size(1_048_577, &NONE), 1_049_088);
    }

    #[test]
    fn docs_example_1200_with_4_divisions_is_1536_not_1280() {
        assert_eq!(round_size(1200, &all(4)), 1536);
    }

    #[test]
    fn issue_161139_examples() {
        assert_eq!(round_size(514 * MIB, &all(2)), 768 * MIB);
        assert_eq!(round_size(514 * MIB, &all(1)), 514 * MIB);
    }

    #[test]
    fn five_million_with_4_divisions() {
        assert_eq!(round_size(5_000_000, &all(4)), 5_242_880);
    }

    #[test]
    fn powers_of_two_are_unchanged() {
        assert_eq!(round_size(64 * MIB, &all(8)), 64 * MIB);
    }

    #[test]
    fn division_index_boundaries() {
        assert_eq!(division_index(1), 0);
        assert_eq!(division_index(2 * MIB - 1), 0);
        assert_eq!(division_index(2 * MIB), 1);
        assert_eq!(division_index(4 * MIB - 1), 1);
        assert_eq!(division_index(4 * MIB), 2);
        assert_eq!(division_index(32 << 30), 15);
        assert_eq!(division_index(u64::MAX), 15);
    }

    #[test]
    fn pool_choice_boundary() {
        assert_eq!(PoolKind::for_size(SMALL_SIZE), PoolKind::Small);
        assert_eq!(PoolKind::for_size(SMALL_SIZE + 512), PoolKind::Large);
    }

    #[test]
    fn allocation_sizes_from_the_spec() {
        let l = LARGE_BUFFER;
        assert_eq!(get_allocation_size(512, l), 2 * MIB);
        assert_eq!(get_allocation_size(MIB, l), 2 * MIB);
        assert_eq!(get_allocation_size(MIB + 512, l), 20 * MIB);
        assert_eq!(get_allocation_size(10 * MIB - 512, l), 20 * MIB);
        assert_eq!(get_allocation_size(10 * MIB, l), 10 * MIB);
        assert_eq!(get_allocation_size(10 * MIB + 512, l), 12 * MIB);
        assert_eq!(get_allocation_size(25 * MIB, l), 26 * MIB);
    }
}
