//! `SimDevice`: a simulated GPU for tests, replay and the CLI.
//!
//! It keeps the ranges it handed out, a capacity, counters of every call,
//! and switches to make calls fail. It `assert!`s the [`Device`] contract,
//! so an allocator bug that double-frees or frees a wrong size panics here.
//!
//! Addresses: by default a new range starts above every address handed out
//! before (aligned to `granularity_bytes`), so results never depend on an
//! arbitrary base address. Replay can queue the addresses a trace recorded
//! with [`SimDevice::push_address`].
//!
//! Events: by default an event is complete as soon as it is recorded.
//! With [`EventMode::Manual`] a test decides when each one completes.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use vramkit_core::{Device, DeviceAddr, DeviceError, EventId, MemInfo, StreamId};

/// A small deterministic random-number generator (xorshift64) for
/// simulations and tests: a seed gives the same sequence on every machine.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (0, which would stay 0, becomes 1).
    pub const fn new(seed: u64) -> XorShift {
        XorShift(if seed == 0 { 1 } else { seed })
    }

    /// The next number.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// When recorded events complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EventMode {
    /// Every event is complete when it is recorded.
    #[default]
    Immediate,
    /// Events stay pending until [`SimDevice::complete_event`],
    /// [`SimDevice::complete_stream`] or a synchronize.
    Manual,
}

/// Counters of every device call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimCounters {
    /// Successful `malloc` calls.
    pub mallocs: u64,
    /// `malloc` calls refused (capacity or injected failure).
    pub failed_mallocs: u64,
    /// `free` calls.
    pub frees: u64,
    /// Events recorded.
    pub events_recorded: u64,
    /// `query_event` calls.
    pub event_queries: u64,
    /// `synchronize_event` calls.
    pub event_syncs: u64,
    /// Events destroyed.
    pub events_destroyed: u64,
    /// Successful `map` calls.
    pub maps: u64,
    /// `map` calls refused.
    pub failed_maps: u64,
    /// `unmap` calls.
    pub unmaps: u64,
    /// Address ranges reserved.
    pub reserves: u64,
    /// Queued addresses not used because they overlapped a live range.
    pub rejected_addresses: u64,
    /// `malloc` and `map` calls refused by an injected failure
    /// ([`SimDevice::fail_next_mallocs`] or [`SimDevice::fail_at_random`]),
    /// not for lack of capacity. Included in `failed_mallocs`/`failed_maps`.
    pub injected_failures: u64,
}

/// A reserved virtual range (expandable segments) and its mapped pages.
#[derive(Clone, Debug)]
struct Reservation {
    size: u64,
    /// Mapped ranges inside it: start -> length (page multiples, never overlapping).
    mapped: BTreeMap<u64, u64>,
}

#[derive(Clone, Copy, Debug)]
struct SimEvent {
    stream: StreamId,
    complete: bool,
}

/// A simulated GPU.
#[derive(Clone, Debug)]
pub struct SimDevice {
    capacity_bytes: u64,
    /// What `mem_get_info` reports as total, when it is not the capacity.
    total_bytes: Option<u64>,
    granularity_bytes: u64,
    base_address: u64,
    /// Live ranges: start address -> size.
    live: BTreeMap<u64, u64>,
    /// Virtual reservations: base -> reservation.
    reservations: BTreeMap<u64, Reservation>,
    virtual_memory: bool,
    used_bytes: u64,
    /// The next address the bump allocator hands out.
    next_address: u64,
    /// Addresses to hand out next, in order, before bumping.
    queued_addresses: VecDeque<u64>,
    /// Reservation bases to hand out next, in order, before bumping.
    queued_reservations: VecDeque<u64>,
    /// Queued addresses are what the real device returned (a verify): a
    /// reservation needs only its base free, see `with_recorded_addresses`.
    recorded_addresses: bool,
    /// `malloc` hands out the highest free range too, not the bump pointer.
    first_fit: bool,
    /// The top of the address space ranges are handed out below: the
    /// highest end handed out or queued so far.
    ceiling: u64,
    faults: Faults,
    event_mode: EventMode,
    events: HashMap<u64, SimEvent>,
    next_event: u64,
    counters: SimCounters,
    clock_us: u64,
}

impl Default for SimDevice {
    fn default() -> Self {
        SimDevice::new(u64::MAX)
    }
}

impl SimDevice {
    /// The default granularity: `cudaMalloc` ranges start 2 MiB apart at least.
    pub const DEFAULT_GRANULARITY: u64 = 2 << 20;
    /// Where the first range starts (a typical CUDA device address).
    pub const DEFAULT_BASE: u64 = 0x7f00_0000_0000;
    /// The address space `with_first_fit` hands out, above the base: room
    /// for dozens of reservations of the largest size (64 TiB).
    pub const ADDRESS_SPACE: u64 = 1 << 52;

    /// A device with `capacity_bytes` of memory (`u64::MAX`: unlimited).
    pub fn new(capacity_bytes: u64) -> SimDevice {
        SimDevice {
            capacity_bytes,
            total_bytes: None,
            granularity_bytes: Self::DEFAULT_GRANULARITY,
            base_address: Self::DEFAULT_BASE,
            live: BTreeMap::new(),
            reservations: BTreeMap::new(),
            virtual_memory: true,
            used_bytes: 0,
            next_address: Self::DEFAULT_BASE,
            queued_addresses: VecDeque::new(),
            queued_reservations: VecDeque::new(),
            recorded_addresses: false,
            first_fit: false,
            ceiling: Self::DEFAULT_BASE,
            faults: Faults { next: 0, rate: 0, rng: 1 },
            event_mode: EventMode::Immediate,
            events: HashMap::new(),
            next_event: 1,
            counters: SimCounters::default(),
            clock_us: 0,
        }
    }

    /// An unlimited device.
    pub fn unlimited() -> SimDevice {
        SimDevice::new(u64::MAX)
    }

    /// Sets where the bump allocator starts (only before the first malloc).
    pub fn with_base_address(mut self, base: u64) -> SimDevice {
        assert!(self.live.is_empty(), "set the base address before the first malloc");
        self.base_address = base;
        self.next_address = base;
        self.ceiling = self.ceiling.max(base);
        self
    }

    /// Reports `total_bytes` as the device's total memory (what memory
    /// fractions and expandable reservations are sized from), while
    /// refusing allocations beyond `capacity_bytes`.
    pub fn with_total_bytes(mut self, total_bytes: u64) -> SimDevice {
        self.total_bytes = Some(total_bytes);
        self
    }

    /// Sets the address granularity (a power of two).
    pub fn with_granularity(mut self, granularity_bytes: u64) -> SimDevice {
        assert!(granularity_bytes.is_power_of_two(), "granularity must be a power of two");
        self.granularity_bytes = granularity_bytes;
        self
    }

    /// Turns the virtual-memory calls (expandable segments) off, like a
    /// driver without them.
    pub fn without_virtual_memory(mut self) -> SimDevice {
        self.virtual_memory = false;
        self
    }

    /// Bytes mapped into reservations.
    pub fn mapped_bytes(&self) -> u64 {
        self.reservations.values().flat_map(|r| r.mapped.values()).sum()
    }

    /// Number of live reservations.
    pub fn reservations(&self) -> usize {
        self.reservations.len()
    }

    /// Sets when events complete.
    pub fn with_event_mode(mut self, mode: EventMode) -> SimDevice {
        self.event_mode = mode;
        self
    }

    /// Bytes of memory on the device.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Changes the capacity (memory "returns" or shrinks). Never below what is in use.
    pub fn set_capacity(&mut self, capacity_bytes: u64) {
        self.capacity_bytes = capacity_bytes;
    }

    /// Bytes currently handed out.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// Number of live ranges.
    pub fn live_ranges(&self) -> usize {
        self.live.len()
    }

    /// The live ranges, (address, size), in address order.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.live.iter().map(|(&a, &s)| (a, s))
    }

    /// Call counters.
    pub fn counters(&self) -> SimCounters {
        self.counters
    }

    /// Refuses the next `n` mallocs with out-of-memory.
    pub fn fail_next_mallocs(&mut self, n: u64) {
        self.faults.next = n;
    }

    /// From now on each `malloc` and `map` fails with probability `rate`
    /// (0 to 1) whatever the free memory, decided by a generator seeded
    /// with `seed`, so a run repeats exactly. A device fault the allocator
    /// must survive: it is reported as out-of-memory, as CUDA reports
    /// `cudaErrorMemoryAllocation`. `rate` 0 turns it off.
    pub fn fail_at_random(&mut self, rate: f64, seed: u64) {
        assert!((0.0..=1.0).contains(&rate), "failure rate {rate} is not a probability");
        self.faults.rate = (rate * (1u64 << 32) as f64) as u64;
        // xorshift must not start at 0; splitmix the seed so nearby seeds differ.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.faults.rng = (z ^ (z >> 31)) | 1;
    }

    /// The next malloc returns `addr` (then the one after that, in order).
    /// Panics in that malloc if the address overlaps a live range.
    pub fn push_address(&mut self, addr: u64) {
        self.queued_addresses.push_back(addr);
    }

    /// Forgets addresses queued with `push_address` or
    /// `push_reservation_address` and not used.
    pub fn clear_queued_addresses(&mut self) {
        self.queued_addresses.clear();
        self.queued_reservations.clear();
    }

    /// The next address-range reservation starts at `addr` (replay of a
    /// trace that recorded it).
    pub fn push_reservation_address(&mut self, addr: u64) {
        self.queued_reservations.push_back(addr);
    }

    /// Queued addresses are what the real device returned, in a replay of
    /// the settings it was recorded with (a verify). Reservations then need
    /// only their base free: the device's memory, which sizes them, is not
    /// in a trace, so a reservation here may be larger than it was, and its
    /// unmapped tail reach over ranges recorded above it. Memory in use
    /// never overlaps.
    pub fn with_recorded_addresses(mut self) -> SimDevice {
        self.recorded_addresses = true;
        self
    }

    /// `malloc` hands out the highest free range below a ceiling far above
    /// the base, as the CUDA driver hands out address space downward and
    /// reuses what was freed, instead of ever higher addresses. Where
    /// releases order equal-size free blocks by address, a replay under
    /// other settings then places them as the device would.
    pub fn with_first_fit(mut self) -> SimDevice {
        self.first_fit = true;
        self.ceiling = self.ceiling.max(self.base_address.saturating_add(Self::ADDRESS_SPACE));
        self
    }

    /// Whether `addr` lies inside a live reservation.
    pub fn in_reservation(&self, addr: u64) -> bool {
        self.reservations.range(..=addr).next_back().is_some_and(|(&base, r)| addr < base + r.size)
    }

    /// Whether a map at `addr` would grow or fill a live reservation: it lies
    /// between the reservation's base and the end of its highest mapped
    /// page (inclusive). A map anywhere else starts a new reservation, as
    /// reservations only grow upward from their base.
    pub fn in_mapped_span(&self, addr: u64) -> bool {
        self.reservations.range(..=addr).next_back().is_some_and(|(&base, r)| {
            let frontier = r.mapped.last_key_value().map_or(base, |(&a, &l)| a + l);
            addr <= frontier
        })
    }

    /// Takes over a range allocated before the simulation started (a
    /// replay's start state), without counting a malloc. Later bump
    /// addresses start above it. Panics if it overlaps a live range.
    pub fn adopt(&mut self, addr: u64, size_bytes: u64) {
        let end = addr.checked_add(size_bytes).expect("adopted range overflows");
        if let Some((&a, &s)) = self.live.range(..end).next_back() {
            assert!(a + s <= addr, "adopted range {addr:#x}+{size_bytes} overlaps live range {a:#x}+{s}");
        }
        self.live.insert(addr, size_bytes);
        self.used_bytes += size_bytes;
        self.next_address = self.next_address.max(align_up(end, self.granularity_bytes));
        self.ceiling = self.ceiling.max(end);
    }

    /// Marks one event complete.
    pub fn complete_event(&mut self, event: EventId) {
        if let Some(e) = self.events.get_mut(&event.0) {
            e.complete = true;
        }
    }

    /// Marks every event recorded on `stream` complete.
    pub fn complete_stream(&mut self, stream: StreamId) {
        for e in self.events.values_mut().filter(|e| e.stream == stream) {
            e.complete = true;
        }
    }

    /// Marks every event complete.
    pub fn complete_all_events(&mut self) {
        for e in self.events.values_mut() {
            e.complete = true;
        }
    }

    /// Events recorded and not yet complete.
    pub fn pending_events(&self) -> usize {
        self.events.values().filter(|e| !e.complete).count()
    }

    /// Sets the clock used for trace entries' `time_us`.
    pub fn set_time_us(&mut self, time_us: u64) {
        self.clock_us = time_us;
    }

    /// The address for a new range of `size` bytes: the next queued one if
    /// it is free, else the bump pointer (first fit for a reservation).
    fn take_address(&mut self, size: u64, reservation: bool) -> u64 {
        if let Some(addr) = self.queued_addresses.pop_front() {
            // A queued address that would overlap (a replay that has already
            // diverged) is not used: the range comes from the bump pointer.
            let fits = if self.recorded_addresses {
                // Only memory in use counts: a recorded reservation needs
                // only its base free (see `with_recorded_addresses`).
                let end = if reservation { addr.checked_add(1) } else { addr.checked_add(size) };
                end.is_some_and(|end| {
                    let clear_of = |m: &BTreeMap<u64, u64>| m.range(..end).next_back().is_none_or(|(&a, &s)| a + s <= addr);
                    clear_of(&self.live) && self.reservations.values().all(|r| clear_of(&r.mapped))
                })
            } else {
                addr.checked_add(size).is_some_and(|end| {
                    let clear_of = |m: &BTreeMap<u64, u64>| m.range(..end).next_back().is_none_or(|(&a, &s)| a + s <= addr);
                    clear_of(&self.live) && self.reservations.range(..end).next_back().is_none_or(|(&a, r)| a + r.size <= addr)
                })
            };
            if fits {
                self.next_address = self.next_address.max(align_up(addr.saturating_add(size), self.granularity_bytes));
                self.ceiling = self.ceiling.max(addr.saturating_add(size));
                return addr;
            }
            self.counters.rejected_addresses += 1;
        }
        if reservation || self.first_fit {
            return self.first_free_range(size);
        }
        let addr = self.next_address;
        self.next_address = align_up(addr + size, self.granularity_bytes);
        self.ceiling = self.ceiling.max(self.next_address);
        addr
    }

    /// The highest range of `size` bytes below the ceiling that is clear of
    /// every live range and reservation: how the CUDA driver hands out
    /// address space, downward, reusing what was freed. So a reservation
    /// freed and made again (the retry ladder's last attempt) gets its old
    /// address back, and equal-size free blocks sort by address as on the
    /// device. Above the ceiling (raising it) when nothing below fits.
    fn first_free_range(&mut self, size: u64) -> u64 {
        let mut taken: Vec<(u64, u64)> = self.live.iter().map(|(&a, &s)| (a, a.saturating_add(s))).collect();
        taken.extend(self.reservations.iter().map(|(&a, r)| (a, a.saturating_add(r.size))));
        taken.sort_unstable_by(|x, y| y.cmp(x));
        let align = self.granularity_bytes;
        let mut hi = self.ceiling;
        for (start, end) in taken {
            if start >= hi {
                continue;
            }
            let at = hi.saturating_sub(size) / align * align;
            if at >= end && at >= self.base_address && hi >= size {
                return at;
            }
            hi = hi.min(start);
        }
        let at = hi.saturating_sub(size) / align * align;
        if hi >= size && at >= self.base_address {
            return at;
        }
        let at = align_up(self.ceiling, align);
        self.ceiling = at.saturating_add(size);
        self.next_address = self.next_address.max(align_up(self.ceiling, align));
        at
    }
}

/// Injected failures of `malloc` and `map`.
#[derive(Clone, Copy, Debug)]
struct Faults {
    /// Calls still to refuse ([`SimDevice::fail_next_mallocs`]).
    next: u64,
    /// Probability that a call fails however much memory is free, in parts
    /// per 2^32 (0: never).
    rate: u64,
    /// xorshift64* state deciding the random failures.
    rng: u64,
}

impl Faults {
    /// Whether this call is refused (consumes one queued refusal or one draw).
    fn inject(&mut self) -> bool {
        if self.next > 0 {
            self.next -= 1;
            return true;
        }
        if self.rate == 0 {
            return false;
        }
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) < self.rate
    }
}

fn align_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

impl Device for SimDevice {
    fn malloc(&mut self, size_bytes: u64, _stream: StreamId) -> Result<DeviceAddr, DeviceError> {
        assert!(size_bytes > 0 && size_bytes % 512 == 0, "malloc of {size_bytes} bytes breaks the contract");
        let over_capacity = self.used_bytes.checked_add(size_bytes).is_none_or(|u| u > self.capacity_bytes);
        let injected = self.faults.inject();
        if injected || over_capacity {
            self.counters.injected_failures += u64::from(injected);
            self.counters.failed_mallocs += 1;
            return Err(DeviceError::OutOfMemory { requested_bytes: size_bytes });
        }
        let addr = self.take_address(size_bytes, false);
        self.live.insert(addr, size_bytes);
        self.used_bytes += size_bytes;
        self.counters.mallocs += 1;
        Ok(DeviceAddr(addr))
    }

    fn free(&mut self, addr: DeviceAddr, size_bytes: u64) {
        match self.live.remove(&addr.0) {
            Some(size) => assert_eq!(size, size_bytes, "free of {addr} with size {size_bytes}, but it has {size}"),
            None => panic!("free of {addr}, which is not a live range"),
        }
        self.used_bytes -= size_bytes;
        self.counters.frees += 1;
    }

    fn mem_get_info(&self) -> MemInfo {
        MemInfo {
            free_bytes: self.capacity_bytes.saturating_sub(self.used_bytes),
            total_bytes: self.total_bytes.unwrap_or(self.capacity_bytes),
        }
    }

    /// What the device handed out (the process is its only user).
    fn process_memory_bytes(&self) -> Option<u64> {
        Some(self.used_bytes)
    }


    fn record_event(&mut self, stream: StreamId) -> EventId {
        let id = self.next_event;
        self.next_event += 1;
        let complete = self.event_mode == EventMode::Immediate;
        self.events.insert(id, SimEvent { stream, complete });
        self.counters.events_recorded += 1;
        EventId(id)
    }

    fn query_event(&mut self, event: EventId) -> bool {
        self.counters.event_queries += 1;
        self.events.get(&event.0).expect("query of an unknown event").complete
    }

    fn synchronize_event(&mut self, event: EventId) {
        self.counters.event_syncs += 1;
        self.events.get_mut(&event.0).expect("sync of an unknown event").complete = true;
    }

    fn destroy_event(&mut self, event: EventId) {
        let e = self.events.remove(&event.0).expect("destroy of an unknown event");
        assert!(e.complete, "destroy of an event that has not completed");
        self.counters.events_destroyed += 1;
    }

    fn time_us(&self) -> u64 {
        self.clock_us
    }

    fn supports_virtual_memory(&self) -> bool {
        self.virtual_memory
    }

    fn reserve_address_range(&mut self, size_bytes: u64) -> Result<DeviceAddr, DeviceError> {
        assert!(self.virtual_memory, "reserve on a device without virtual memory");
        assert!(size_bytes > 0 && size_bytes % 512 == 0, "reserve of {size_bytes} bytes breaks the contract");
        if let Some(base) = self.queued_reservations.pop_front() {
            self.queued_addresses.push_front(base);
        }
        let addr = self.take_address(size_bytes, true);
        self.reservations.insert(addr, Reservation { size: size_bytes, mapped: BTreeMap::new() });
        self.counters.reserves += 1;
        Ok(DeviceAddr(addr))
    }

    fn release_address_range(&mut self, addr: DeviceAddr, size_bytes: u64) {
        let r = self.reservations.remove(&addr.0).unwrap_or_else(|| panic!("release of {addr}, which is not a reservation"));
        assert_eq!(r.size, size_bytes, "release of reservation {addr} with the wrong size");
        assert!(r.mapped.is_empty(), "release of reservation {addr} while pages are mapped");
    }

    fn map(&mut self, addr: DeviceAddr, size_bytes: u64, page_bytes: u64) -> Result<(), DeviceError> {
        if self.recorded_addresses {
            // Reservations may nest here (see `with_recorded_addresses`): a
            // replay that has diverged can grow one over another's pages,
            // which a real device could not have done. Refused, not a panic.
            let end = addr.0.saturating_add(size_bytes);
            let clash = self
                .reservations
                .values()
                .flat_map(|r| r.mapped.range(..end).next_back())
                .chain(self.live.range(..end).next_back())
                .find(|(&a, &l)| a + l > addr.0);
            if let Some((&a, &l)) = clash {
                return Err(DeviceError::Other {
                    call: "cuMemMap",
                    message: format!("{addr}+{size_bytes} would overlap mapped {a:#x}+{l}: the replay has left the recorded addresses"),
                });
            }
        }
        let (&base, r) = self.reservations.range_mut(..=addr.0).next_back().expect("map outside any reservation");
        let end = addr.0 + size_bytes;
        assert!(end <= base + r.size, "map of {addr}+{size_bytes} past the reservation at {base:#x}");
        assert!((addr.0 - base) % page_bytes == 0 && size_bytes % page_bytes == 0, "map of a partial page");
        if let Some((&a, &l)) = r.mapped.range(..end).next_back() {
            assert!(a + l <= addr.0, "map of {addr}+{size_bytes} over mapped {a:#x}+{l}");
        }
        let over = self.used_bytes.checked_add(size_bytes).is_none_or(|u| u > self.capacity_bytes);
        let injected = self.faults.inject();
        if injected || over {
            self.counters.injected_failures += u64::from(injected);
            self.counters.failed_maps += 1;
            return Err(DeviceError::OutOfMemory { requested_bytes: size_bytes });
        }
        r.mapped.insert(addr.0, size_bytes);
        self.used_bytes += size_bytes;
        self.counters.maps += 1;
        Ok(())
    }

    fn unmap(&mut self, addr: DeviceAddr, size_bytes: u64) {
        let (&base, r) = self.reservations.range_mut(..=addr.0).next_back().expect("unmap outside any reservation");
        let end = addr.0 + size_bytes;
        assert!(end <= base + r.size, "unmap past the reservation");
        // Split mapped runs at the unmap bounds, then drop the runs inside.
        let overlapping: Vec<(u64, u64)> = r.mapped.range(..end).filter(|(&a, &l)| a + l > addr.0).map(|(&a, &l)| (a, l)).collect();
        let mut unmapped = 0;
        for (a, l) in overlapping {
            r.mapped.remove(&a);
            if a < addr.0 {
                r.mapped.insert(a, addr.0 - a);
            }
            if a + l > end {
                r.mapped.insert(end, a + l - end);
            }
            unmapped += (a + l).min(end) - a.max(addr.0);
        }
        assert_eq!(unmapped, size_bytes, "unmap of {addr}+{size_bytes}, not all of it mapped");
        self.used_bytes -= size_bytes;
        self.counters.unmaps += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bump_addresses_never_reuse_and_respect_granularity() {
        let mut d = SimDevice::unlimited();
        let a = d.malloc(512, StreamId(0)).unwrap();
        let b = d.malloc(4 << 20, StreamId(0)).unwrap();
        assert_eq!(a.0, SimDevice::DEFAULT_BASE);
        assert_eq!(b.0, SimDevice::DEFAULT_BASE + (2 << 20));
        d.free(a, 512);
        let c = d.malloc(512, StreamId(0)).unwrap();
        assert_eq!(c.0, SimDevice::DEFAULT_BASE + (6 << 20));
    }

    #[test]
    fn capacity_and_injected_failures_refuse() {
        let mut d = SimDevice::new(4 << 20);
        assert!(d.malloc(4 << 20, StreamId(0)).is_ok());
        assert_eq!(d.malloc(512, StreamId(0)), Err(DeviceError::OutOfMemory { requested_bytes: 512 }));
        d.set_capacity(u64::MAX);
        d.fail_next_mallocs(1);
        assert!(d.malloc(512, StreamId(0)).is_err());
        assert!(d.malloc(512, StreamId(0)).is_ok());
        assert_eq!(d.counters().failed_mallocs, 2);
    }

    #[test]
    fn random_failures_follow_the_rate_and_repeat_with_the_seed() {
        let run = |rate: f64, seed: u64| {
            let mut d = SimDevice::unlimited();
            d.fail_at_random(rate, seed);
            let outcomes: Vec<bool> = (0..10_000)
                .map(|_| match d.malloc(512, StreamId(0)) {
                    Ok(a) => {
                        d.free(a, 512);
                        true
                    }
                    Err(_) => false,
                })
                .collect();
            (outcomes, d.counters())
        };
        for rate in [0.01, 0.1, 0.5] {
            let (outcomes, counters) = run(rate, 7);
            let failed = outcomes.iter().filter(|ok| !**ok).count() as f64;
            assert!((failed / 10_000.0 - rate).abs() < 0.02, "rate {rate}: {failed} of 10000 failed");
            assert_eq!(counters.injected_failures, failed as u64);
            assert_eq!(run(rate, 7).0, outcomes, "the same seed fails the same calls");
            assert_ne!(run(rate, 8).0, outcomes);
        }
        assert!(run(0.0, 7).0.iter().all(|ok| *ok));
    }

    #[test]
    fn queued_addresses_come_first() {
        let mut d = SimDevice::unlimited();
        d.push_address(0x1000_0000);
        assert_eq!(d.malloc(2 << 20, StreamId(0)).unwrap().0, 0x1000_0000);
    }

    #[test]
    #[should_panic(expected = "not a live range")]
    fn double_free_panics() {
        let mut d = SimDevice::unlimited();
        let a = d.malloc(512, StreamId(0)).unwrap();
        d.free(a, 512);
        d.free(a, 512);
    }

    #[test]
    fn manual_events_wait_for_the_test() {
        let mut d = SimDevice::unlimited().with_event_mode(EventMode::Manual);
        let e = d.record_event(StreamId(7));
        assert!(!d.query_event(e));
        d.complete_stream(StreamId(7));
        assert!(d.query_event(e));
        d.destroy_event(e);
        assert_eq!(d.pending_events(), 0);
    }
}
