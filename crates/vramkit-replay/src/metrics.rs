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
/// the samples where allocated or reserved peak within each bucket.
#[derive(Clone, Debug)]
pub(crate) struct Timeline {
    every: u64,
    bucket: Vec<Sample>,
    pub samples: Vec<Sample>,
    enabled: bool,
}

impl Timeline {
    pub fn new(events: u64, max_points: usize) -> Timeline {
        let enabled = max_points > 0;
        let every = if enabled { (events / (max_points as u64 / 2).max(1)).max(1) } else { u64::MAX };
        Timeline { every, bucket: Vec::new(), samples: Vec::new(), enabled }
    }

    pub fn push(&mut self, s: Sample) {
        if !self.enabled {
            return;
        }
        self.bucket.push(s);
        if self.bucket.len() as u64 >= self.every {
            self.flush();
        }
    }

    pub fn flush(&mut self) {
        if self.bucket.is_empty() {
            return;
        }
        let hi_reserved = *self.bucket.iter().max_by_key(|s| (s.reserved_bytes, s.allocated_bytes)).expect("non-empty");
        let hi_allocated = *self.bucket.iter().max_by_key(|s| (s.allocated_bytes, s.reserved_bytes)).expect("non-empty");
        let mut keep = vec![hi_reserved, hi_allocated];
        keep.sort_by_key(|s| s.event);
        keep.dedup();
        self.samples.extend(keep);
        self.bucket.clear();
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
