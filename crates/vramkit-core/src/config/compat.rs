//! Behaviour that differs between PyTorch releases (spec section 12).
//!
//! Each difference is one switch, so a replay of a trace recorded on an older
//! PyTorch can ask for that release's behaviour without forking the code.

/// A PyTorch allocator generation, as the spec labels them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub enum Generation {
    /// Mid-2024 main, about PyTorch 2.4.
    R24,
    /// PyTorch 2.6 to 2.9 (the `CUDAAllocatorConfig` era).
    V2_8,
    /// Late-2025 main, about PyTorch 2.10 and later: the default.
    R26,
    /// PyTorch 2.12: R26, with size ties in the free sets broken by block age.
    V2_12,
    /// PyTorch 2.13 and later: R26, with size ties in the free sets broken
    /// by segment age.
    V2_13,
}

/// One switch per row of spec section 12. `Compat::R26` is the default.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct Compat {
    /// `>` in a `roundup_power2_divisions` list fills from the last listed
    /// index itself, overwriting it (R24, 2.8), instead of from the next one (R26).
    pub roundup_gt_overwrites_last: bool,
    /// `max_split_size_mb` must be strictly above 20 (R24, 2.8) instead of at
    /// least `large_segment_size_mb` (R26).
    pub max_split_size_strictly_above_20: bool,
    /// The oversize reuse tolerance is a fixed 20 MiB (R24) instead of
    /// `max_non_split_rounding_mb`.
    pub fixed_oversize_tolerance: bool,
    /// `max_non_split_rounding_mb` and `large_segment_size_mb` are accepted keys.
    pub has_max_non_split_rounding: bool,
    /// `large_segment_size_mb` is an accepted key (R26).
    pub has_large_segment_size: bool,
    /// A memory fraction limit is in effect once a fraction was ever set, even
    /// 1.0 (R24, 2.8), instead of only when it is below 1.0 (R26).
    pub fraction_limit_when_ever_set: bool,
    /// GC and the targeted release may pick expandable blocks (R24).
    pub release_considers_expandable: bool,
    /// Private pools are chosen first-registered-first (R24) instead of
    /// most-recent-first (R26).
    pub private_pool_first_registered: bool,
    /// How the free sets order blocks of equal size (on one stream).
    pub size_ties: SizeTies,
    /// With expandable segments on, private pools grow expandable segments
    /// too (2.6 and later); torch 2.4 gives them classic `cudaMalloc`
    /// segments (measured on the binaries).
    pub expandable_in_private_pools: bool,
    /// The steps a CUDA-graph capture forbids (processing and waiting on
    /// stream events, recording a free's events, releasing the default
    /// pools' cache in `empty_cache` and before the last retry) are skipped
    /// only while the current stream is capturing ([`Device::is_capturing`](crate::Device::is_capturing)),
    /// not whenever an allocate-to-pool is active: a private pool used
    /// without a capture (`torch.cuda.use_mem_pool`) no longer holds freed
    /// blocks back or refuses to release cache (torch 2.13 and later,
    /// `is_capture_context()`; measured on the binaries).
    pub capture_guards_ask_the_stream: bool,
}

/// How the free sets order free blocks of equal size: which one best fit
/// takes, and the order releases walk.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub enum SizeTies {
    /// Lowest address first (`BlockComparatorSize`): up to torch 2.11.
    #[default]
    Address,
    /// Oldest block first, by a counter every new block object gets: the
    /// block of a new segment, the allocated part of a split, the parts an
    /// unmap or a map leaves (`BlockComparatorRegistrationCounter`, no
    /// address): torch 2.12.
    BlockAge,
    /// Oldest segment first, by a counter each `cudaMalloc` and each
    /// expandable reservation gets and its blocks share, then lowest
    /// address (`BlockComparatorSizeCounterAddress`): torch 2.13 and later.
    SegmentAge,
}

impl Compat {
    /// Late-2025 PyTorch (2.10+).
    pub const R26: Compat = Compat {
        roundup_gt_overwrites_last: false,
        max_split_size_strictly_above_20: false,
        fixed_oversize_tolerance: false,
        has_max_non_split_rounding: true,
        has_large_segment_size: true,
        fraction_limit_when_ever_set: false,
        release_considers_expandable: false,
        private_pool_first_registered: false,
        size_ties: SizeTies::Address,
        expandable_in_private_pools: true,
        capture_guards_ask_the_stream: false,
    };
    /// PyTorch 2.12: R26, with size ties broken by block age.
    pub const V2_12: Compat = Compat { size_ties: SizeTies::BlockAge, ..Compat::R26 };
    /// PyTorch 2.13 and later: R26, with size ties broken by segment age and
    /// the capture guards asking the stream.
    pub const V2_13: Compat = Compat { size_ties: SizeTies::SegmentAge, capture_guards_ask_the_stream: true, ..Compat::R26 };
    /// PyTorch 2.6 to 2.9.
    pub const V2_8: Compat = Compat {
        roundup_gt_overwrites_last: true,
        max_split_size_strictly_above_20: true,
        fixed_oversize_tolerance: false,
        has_max_non_split_rounding: true,
        has_large_segment_size: false,
        fraction_limit_when_ever_set: true,
        release_considers_expandable: false,
        private_pool_first_registered: false,
        size_ties: SizeTies::Address,
        expandable_in_private_pools: true,
        capture_guards_ask_the_stream: false,
    };
    /// Mid-2024 PyTorch (2.4).
    pub const R24: Compat = Compat {
        roundup_gt_overwrites_last: true,
        max_split_size_strictly_above_20: true,
        fixed_oversize_tolerance: true,
        has_max_non_split_rounding: false,
        has_large_segment_size: false,
        fraction_limit_when_ever_set: true,
        release_considers_expandable: true,
        private_pool_first_registered: true,
        size_ties: SizeTies::Address,
        expandable_in_private_pools: false,
        capture_guards_ask_the_stream: false,
    };

    /// The switches of one generation.
    pub const fn of(generation: Generation) -> Compat {
        match generation {
            Generation::R24 => Self::R24,
            Generation::V2_8 => Self::V2_8,
            Generation::R26 => Self::R26,
            Generation::V2_12 => Self::V2_12,
            Generation::V2_13 => Self::V2_13,
        }
    }
}

impl Default for Compat {
    fn default() -> Self {
        Self::R26
    }
}
