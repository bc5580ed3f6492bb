//! What a replay measures.

use vramkit_core::rounding::{ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE};

/// One point of a replay's timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Sample {
    /// Index of the trace entry after which this was taken.
    pub event: u64,
    /// Bytes of allocated blocks (rounded).
    pub allocated_bytes: u64,
    /// Bytes reserved from the device.
    pub reserved_bytes: u64,
    /// Bytes the program asked for, of live blocks.
    pub requested_bytes: u64,
}

/// The figures of one replay.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Metrics {
    /// Trace entries replayed.
    pub events: u64,
    /// Highest reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Highest allocated bytes (rounded block sizes).
    pub peak_allocated_bytes: u64,
    /// Highest requested bytes.
    pub peak_requested_bytes: u64,
    /// The least any setting could reserve: the peak of live bytes rounded
    /// to 512 B, small-pool bytes to 2 MiB segments and large-pool bytes to
    /// 2 MiB (or to the page of an expandable segment).
    pub lower_bound_bytes: u64,
    /// `peak_allocated_bytes / peak_reserved_bytes`.
    pub utilization: f64,
    /// Reserved minus allocated at the moment of peak reserved.
    pub waste_bytes_at_peak: u64,
    /// Highest bytes of free blocks inside partly used segments.
    pub peak_inactive_split_bytes: u64,
    /// The largest free block when reserved peaked.
    pub largest_free_block_at_peak: u64,
    /// `cudaMalloc` calls (or page-map calls).
    pub device_mallocs: u64,
    /// `cudaFree` calls (or unmap calls).
    pub device_frees: u64,
    /// Requests that needed the retry ladder (`num_alloc_retries`).
    pub alloc_retries: u64,
    /// The first trace entry (an `alloc`) that failed, if any.
    pub first_oom_event: Option<u64>,
    /// Allocations that failed.
    pub oom_count: u64,
    /// The timeline, downsampled, always keeping the peaks (empty unless asked for).
    pub timeline: Vec<Sample>,
}

/// Tracks the live-bytes lower bound as blocks come and go.
#[derive(Clone, Debug, Default)]
pub(crate) struct LowerBound {
    small: u64,
    large: u64,
    large_page: u64,
    pub peak: u64,
}

impl LowerBound {
    pub fn new(large_page: u64) -> LowerBound {
        LowerBound { large_page: large_page.max(ROUND_LARGE), ..LowerBound::default() }
    }

    fn rounded(size: u64) -> u64 {
        size.div_ceil(512) * 512
    }

    pub fn add(&mut self, requested: u64) {
        let r = Self::rounded(requested.max(1));
        if r <= SMALL_SIZE {
            self.small += r;
        } else {
            self.large += r;
        }
        // Each part rounds up by less than its unit, so below this the
        // peak cannot move and the divisions are skipped.
        if self.small.saturating_add(self.large).saturating_add(SMALL_BUFFER + self.large_page) <= self.peak {
            return;
        }
        let now = self.small.div_ceil(SMALL_BUFFER) * SMALL_BUFFER + self.large.div_ceil(self.large_page) * self.large_page;
        self.peak = self.peak.max(now);
    }

    pub fn remove(&mut self, requested: u64) {
        let r = Self::rounded(requested.max(1));
        if r <= SMALL_SIZE {
            self.small = self.small.saturating_sub(r);
        } else {
            self.large = self.large.saturating_sub(r);
        }
    }
}

/// Keeps a timeline of at most about `max_points` samples, always keeping
/// the samples where allocated or reserved peak within each bucket of
/// `every` entries (the last of equals). Each bucket's two highs are kept
/// as the samples come, none stored in between.
#[derive(Clone, Debug)]
pub(crate) struct Timeline {
    every: u64,
    /// Samples in the current bucket.
    in_bucket: u64,
    /// The bucket's highest (reserved, allocated) and (allocated, reserved).
    hi_reserved: Sample,
    hi_allocated: Sample,
    pub samples: Vec<Sample>,
    enabled: bool,
}

impl Timeline {
    pub fn new(events: u64, max_points: usize) -> Timeline {
        let enabled = max_points > 0;
        let every = if enabled { (events / (max_points as u64 / 2).max(1)).max(1) } else { u64::MAX };
        Timeline { every, in_bucket: 0, hi_reserved: Sample::default(), hi_allocated: Sample::default(), samples: Vec::new(), enabled }
    }

    /// Whether it keeps samples at all.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    #[inline]
    pub fn push(&mut self, s: Sample) {
        if !self.enabled {
            return;
        }
        let first = self.in_bucket == 0;
        if first || (s.reserved_bytes, s.allocated_bytes) >= (self.hi_reserved.reserved_bytes, self.hi_reserved.allocated_bytes) {
            self.hi_reserved = s;
        }
        if first || (s.allocated_bytes, s.reserved_bytes) >= (self.hi_allocated.allocated_bytes, self.hi_allocated.reserved_bytes) {
            self.hi_allocated = s;
        }
        self.in_bucket += 1;
        if self.in_bucket >= self.every {
            self.flush();
        }
    }

    pub fn flush(&mut self) {
        if self.in_bucket == 0 {
            return;
        }
        let (a, b) = (self.hi_reserved, self.hi_allocated);
        match a.event.cmp(&b.event) {
            std::cmp::Ordering::Less => self.samples.extend([a, b]),
            std::cmp::Ordering::Equal => self.samples.push(a),
            std::cmp::Ordering::Greater => self.samples.extend([b, a]),
        }
        self.in_bucket = 0;
    }
}

/// `memory_stats()` as the snapshot's segments describe it: current values
/// only (peaks equal them; totals count the state as allocated).
pub fn stats_from_segments(segments: &[vramkit_core::SegmentInfo], max_split_size: Option<u64>) -> vramkit_core::DeviceStats {
    use vramkit_core::{BlockState, DeviceStats, PoolKind, Stat, StatArray};
    let mut st = DeviceStats { max_split_size: max_split_size.map_or(-1, |b| b as i64), ..DeviceStats::default() };
    let limit = max_split_size.unwrap_or(u64::MAX);
    fn add(a: &mut StatArray, kind: PoolKind, v: u64) {
        let v = v as i64;
        let bump = |s: &mut Stat| {
            s.current += v;
            s.peak += v;
            s.allocated += v;
        };
        bump(&mut a.all);
        match kind {
            PoolKind::Small => bump(&mut a.small_pool),
            PoolKind::Large => bump(&mut a.large_pool),
        }
    }
    for s in segments {
        let k = s.segment_type;
        add(&mut st.reserved_bytes, k, s.total_size);
        if !s.is_expandable {
            add(&mut st.segment, k, 1);
            if s.total_size >= limit {
                st.oversize_segments.current += 1;
                st.oversize_segments.peak += 1;
                st.oversize_segments.allocated += 1;
            }
        }
        for b in &s.blocks {
            match b.state {
                BlockState::ActiveAllocated | BlockState::ActivePendingFree => {
                    if b.state == BlockState::ActiveAllocated {
                        add(&mut st.allocation, k, 1);
                        add(&mut st.allocated_bytes, k, b.size);
                        if b.size >= limit {
                            st.oversize_allocations.current += 1;
                            st.oversize_allocations.peak += 1;
                            st.oversize_allocations.allocated += 1;
                        }
                    }
                    add(&mut st.active, k, 1);
                    add(&mut st.active_bytes, k, b.size);
                    add(&mut st.requested_bytes, k, b.requested_size);
                }
                BlockState::Inactive if s.blocks.len() > 1 && !s.is_expandable => {
                    add(&mut st.inactive_split, k, 1);
                    add(&mut st.inactive_split_bytes, k, b.size);
                }
                BlockState::Inactive => {}
            }
        }
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The timeline as first written: each bucket stored whole, then its
    /// highs found (`max_by_key` keeps the last of equals), sorted, deduplicated.
    fn stored(samples: &[Sample], every: usize) -> Vec<Sample> {
        let mut out = Vec::new();
        for bucket in samples.chunks(every) {
            let hi_reserved = *bucket.iter().max_by_key(|s| (s.reserved_bytes, s.allocated_bytes)).expect("non-empty");
            let hi_allocated = *bucket.iter().max_by_key(|s| (s.allocated_bytes, s.reserved_bytes)).expect("non-empty");
            let mut keep = vec![hi_reserved, hi_allocated];
            keep.sort_by_key(|s| s.event);
            keep.dedup();
            out.extend(keep);
        }
        out
    }

    proptest! {
        /// The streaming timeline keeps exactly the samples the stored one
        /// did, ties included (few distinct values make them common).
        #[test]
        fn keeps_each_buckets_highs_as_storing_it_did(
            values in proptest::collection::vec((0u64..4, 0u64..4), 0..300),
            points in 1usize..40,
        ) {
            let samples: Vec<Sample> = values
                .iter()
                .enumerate()
                .map(|(i, &(a, r))| Sample { event: i as u64 + 1, allocated_bytes: a, reserved_bytes: r, requested_bytes: a })
                .collect();
            let mut t = Timeline::new(samples.len() as u64, points);
            samples.iter().for_each(|&s| t.push(s));
            t.flush();
            prop_assert_eq!(t.samples, stored(&samples, t.every as usize));
        }
    }

    proptest! {
        /// The lower bound's peak skips the rounding where it cannot move
        /// the peak: the same peak as rounding after every change.
        #[test]
        fn the_lower_bound_peak_is_the_rounded_peak(
            page in prop_oneof![Just(0u64), Just(2 << 20), Just(20 << 20)],
            changes in proptest::collection::vec((any::<bool>(), 1u64..(64 << 20)), 1..300),
        ) {
            let mut bound = LowerBound::new(page);
            let (mut live, mut peak): (Vec<u64>, u64) = (Vec::new(), 0);
            let unit = |bytes: u64, of: u64| bytes.div_ceil(of) * of;
            for (add, size) in changes {
                if add || live.is_empty() {
                    bound.add(size);
                    live.push(size);
                } else {
                    let gone = live.swap_remove(size as usize % live.len());
                    bound.remove(gone);
                }
                let rounded: Vec<u64> = live.iter().map(|&b| unit(b, 512)).collect();
                let small: u64 = rounded.iter().filter(|&&r| r <= SMALL_SIZE).sum();
                let large: u64 = rounded.iter().filter(|&&r| r > SMALL_SIZE).sum();
                peak = peak.max(unit(small, SMALL_BUFFER) + unit(large, page.max(ROUND_LARGE)));
                prop_assert_eq!(bound.peak, peak);
            }
        }
    }
}
