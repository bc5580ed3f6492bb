//! Eight threads doing mixed operations through one `SharedAllocator`, the
//! front end behind the C ABI and the Python package: mallocs, frees on
//! the allocating thread and on the next one, `record_stream`, statistics,
//! summaries, snapshots, `empty_cache`, boundary misuse, all on a device
//! that refuses 5% of its mallocs at random. A shadow map of live ranges
//! panics if a block is handed out twice; at the end no block is lost, the
//! statistics equal what the threads counted, the misuse counter equals
//! the misuse committed, and the device holds exactly the reserved bytes.
//!
//! CI runs a few thousand operations per thread; the long run (`#[ignore]`)
//! a million per thread, in release:
//!
//! ```text
//! cargo test -p vramkit-capi --release --test tests concurrency::a_million -- --ignored --nocapture
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use vramkit_capi::SharedAllocator;
use vramkit_core::{AllocatorConfig, DeviceAddr, DeviceStats, StreamId};
use vramkit_sim::SimDevice;
use vramkit_sim::XorShift;

const THREADS: usize = 8;


/// Both pools, splitting, oversize blocks, and now and then a request
/// large enough to make the allocator release its cache and retry.
fn size(rng: &mut XorShift) -> u64 {
    match rng.below(100) {
        0..=59 => 1 + rng.below(64 << 10),
        60..=89 => (1 << 20) + rng.below(8 << 20),
        90..=98 => (16 << 20) + rng.below(48 << 20),
        _ => (256 << 20) + rng.below(768 << 20),
    }
}

/// Live ranges handed out: start -> (end, size asked). Panics on overlap.
#[derive(Default)]
struct Shadow {
    live: BTreeMap<u64, (u64, u64)>,
}

impl Shadow {
    fn handed_out(&mut self, addr: DeviceAddr, size: u64) {
        let (start, end) = (addr.0, addr.0 + size);
        if let Some((&s, &(e, _))) = self.live.range(..end).next_back() {
            assert!(e <= start, "{addr} (+{size}) handed out while {s:#x}..{e:#x} is live");
        }
        self.live.insert(start, (end, size));
    }

    fn given_back(&mut self, addr: DeviceAddr, size: u64) {
        let (_, asked) = self.live.remove(&addr.0).unwrap_or_else(|| panic!("{addr} freed but not live"));
        assert_eq!(asked, size);
    }
}

/// What the threads did, counted as they did it.
#[derive(Default, Debug)]
struct Counts {
    ops: AtomicU64,
    mallocs: AtomicU64,
    ooms: AtomicU64,
    frees: AtomicU64,
    cross_thread_frees: AtomicU64,
    misuse: AtomicU64,
}

impl Counts {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Statistics that must hold at any instant, read while other threads work.
fn check_consistent(stats: &DeviceStats) {
    for (name, stat) in [
        ("allocation", stats.allocation.all),
        ("allocated_bytes", stats.allocated_bytes.all),
        ("active_bytes", stats.active_bytes.all),
        ("reserved_bytes", stats.reserved_bytes.all),
        ("segment", stats.segment.all),
    ] {
        assert!(stat.current >= 0 && stat.peak >= stat.current, "{name}: {stat:?}");
        assert_eq!(stat.allocated - stat.freed, stat.current, "{name}: {stat:?}");
    }
    assert!(stats.allocated_bytes.all.current <= stats.active_bytes.all.current);
    assert!(stats.active_bytes.all.current <= stats.reserved_bytes.all.current);
}

/// One thread's share: `ops` operations; blocks it sends to `next` are
/// freed by that thread.
fn worker(
    t: usize,
    ops: u64,
    shared: &SharedAllocator<SimDevice>,
    shadow: &Mutex<Shadow>,
    counts: &Counts,
    next: mpsc::Sender<(DeviceAddr, u64)>,
    inbox: mpsc::Receiver<(DeviceAddr, u64)>,
) {
    let mut rng = XorShift::new(0x9e37_79b9_7f4a_7c15 ^ ((t as u64 + 1) * 0x1234_5678_9abc));
    let own_stream = StreamId(t as u64 % 3);
    let mut mine: Vec<(DeviceAddr, u64)> = Vec::new();
    let free = |addr: DeviceAddr, size: u64| {
        shadow.lock().unwrap().given_back(addr, size);
        shared.free(addr, size).expect("free of a live block");
        Counts::add(&counts.frees);
    };
    for _ in 0..ops {
        Counts::add(&counts.ops);
        // Blocks the previous thread allocated and handed over.
        while let Ok((addr, size)) = inbox.try_recv() {
            free(addr, size);
            Counts::add(&counts.cross_thread_frees);
        }
        let roll = rng.below(1000);
        match roll {
            0..=399 if mine.len() < 32 => {
                let size = size(&mut rng);
                let stream = if rng.below(4) == 0 { StreamId(rng.below(3)) } else { own_stream };
                match shared.malloc(size, stream) {
                    Ok(addr) => {
                        shadow.lock().unwrap().handed_out(addr, size);
                        mine.push((addr, size));
                        Counts::add(&counts.mallocs);
                    }
                    Err(error) => {
                        assert!(error.as_oom().is_some(), "{error}");
                        Counts::add(&counts.ooms);
                    }
                }
            }
            0..=749 if !mine.is_empty() => {
                let (addr, size) = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                if roll >= 600 {
                    next.send((addr, size)).expect("the next thread is running");
                } else {
                    free(addr, size);
                }
            }
            750..=799 if !mine.is_empty() => {
                let (addr, _) = mine[rng.below(mine.len() as u64) as usize];
                shared.record_stream(addr, StreamId(rng.below(3))).expect("record_stream of a live block");
            }
            800..=829 => {
                // Misuse: an address no block ever has (not 512-aligned), a
                // null with a size, or a wrong size (which still frees).
                Counts::add(&counts.misuse);
                match rng.below(4) {
                    0 => assert!(shared.free(DeviceAddr(0x7f00_0000_0001 + 2 * rng.below(1 << 30)), 8).unwrap_err().is_misuse()),
                    1 => assert!(shared.free(DeviceAddr(0), 16).unwrap_err().is_misuse()),
                    2 => assert!(shared.record_stream(DeviceAddr(0x3), StreamId(1)).unwrap_err().is_misuse()),
                    _ => match mine.pop() {
                        Some((addr, size)) => {
                            shadow.lock().unwrap().given_back(addr, size);
                            assert!(shared.free(addr, size + 1).unwrap_err().is_misuse());
                            Counts::add(&counts.frees);
                        }
                        None => assert!(shared.free(DeviceAddr(0), 1).unwrap_err().is_misuse()),
                    },
                }
            }
            830..=979 => check_consistent(&shared.stats()),
            980..=989 => shared.empty_cache().expect("empty_cache"),
            990..=996 => assert!(shared.memory_stats()["allocation.all.current"] >= 0),
            997..=998 => assert!(shared.memory_summary(roll == 998).contains("PyTorch CUDA memory summary")),
            _ => assert!(shared.snapshot().segments.iter().all(|s| s.blocks.iter().map(|b| b.size).sum::<u64>() == s.total_size)),
        }
    }
    for handover in mine {
        next.send(handover).expect("the next thread is running");
    }
    drop(next);
    // Until every thread that sends here is done.
    for (addr, size) in inbox {
        free(addr, size);
        Counts::add(&counts.cross_thread_frees);
    }
}

/// Runs `ops` operations on each of eight threads and checks the end state.
fn eight_threads(ops: u64) {
    let start = std::time::Instant::now();
    // 4 GiB: enough pressure that some requests release the cache and retry.
    let shared = SharedAllocator::new(SimDevice::new(4 << 30), AllocatorConfig::pytorch_default(), 0);
    shared.with_allocator(|alloc| alloc.device_mut().fail_at_random(0.05, 42)).unwrap();
    let shadow = Mutex::new(Shadow::default());
    let counts = Counts::default();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel::<(DeviceAddr, u64)>()).unzip();
    std::thread::scope(|scope| {
        for (t, inbox) in receivers.into_iter().enumerate() {
            let next = senders[(t + 1) % THREADS].clone();
            let (shared, shadow, counts) = (&shared, &shadow, &counts);
            scope.spawn(move || worker(t, ops, shared, shadow, counts, next, inbox));
        }
        drop(senders);
    });

    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let shadow = shadow.into_inner().unwrap();
    assert!(shadow.live.is_empty(), "{} blocks lost", shadow.live.len());
    assert_eq!(shared.live_count(), 0);
    assert_eq!(get(&counts.frees), get(&counts.mallocs));
    assert!(get(&counts.cross_thread_frees) > 0);

    // Blocks freed after a record_stream stay active until their events are
    // seen complete (at the next malloc in PyTorch); see them now.
    shared.with_allocator(|alloc| alloc.process_events()).unwrap();
    let stats = shared.stats();
    check_consistent(&stats);
    assert_eq!(stats.allocation.all.current, 0);
    assert_eq!(stats.allocated_bytes.all.current, 0);
    assert_eq!(stats.active_bytes.all.current, 0);
    assert_eq!(stats.requested_bytes.all.current, 0);
    assert_eq!(stats.allocation.all.allocated as u64, get(&counts.mallocs));
    assert_eq!(stats.allocation.all.freed as u64, get(&counts.frees));
    assert_eq!(stats.num_ooms as u64, get(&counts.ooms));
    assert_eq!(shared.boundary_error_count(), get(&counts.misuse));
    let (device_bytes, injected) = shared
        .with_allocator(|alloc| {
            alloc.check_invariants().expect("invariants");
            assert_eq!(alloc.device().used_bytes(), alloc.total_reserved_bytes(), "device bytes == reserved bytes");
            (alloc.device().used_bytes(), alloc.device().counters().injected_failures)
        })
        .unwrap();
    assert_eq!(device_bytes, stats.reserved_bytes.all.current as u64);
    shared.empty_cache().unwrap();
    assert_eq!(shared.stats().reserved_bytes.all.current, 0);
    shared
        .with_allocator(|alloc| {
            assert_eq!(alloc.device().used_bytes(), 0);
            assert_eq!(alloc.device().live_ranges(), 0);
        })
        .unwrap();
    println!(
        "{THREADS} threads x {ops} operations: {} operations, {} mallocs, {} frees ({} on another thread), {} OOMs, \
         {} misuse refused and counted, {injected} device faults injected, 0 blocks lost or doubled, {:.1} s",
        get(&counts.ops),
        get(&counts.mallocs),
        get(&counts.frees),
        get(&counts.cross_thread_frees),
        get(&counts.ooms),
        get(&counts.misuse),
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn eight_threads_of_mixed_operations() {
    eight_threads(1500);
}

#[test]
#[ignore = "8 million operations; run in release (see the module docs)"]
fn a_million_operations_on_each_of_eight_threads() {
    let ops = std::env::var("VRAMKIT_THREAD_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    eight_threads(ops);
}
