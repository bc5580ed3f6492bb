//! Eight threads allocating and freeing through one `SharedAllocator`,
//! half of the frees on another thread than the allocating one, against a
//! shadow map of live ranges.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Mutex;
use vramkit_capi::SharedAllocator;
use vramkit_core::{AllocatorConfig, DeviceAddr, StreamId};
use vramkit_sim::SimDevice;
use vramkit_sim::XorShift;

const THREADS: usize = 8;
const OPS_PER_THREAD: usize = 2500;


/// A size mix touching both pools, splitting and oversize blocks.
fn size(rng: &mut XorShift) -> u64 {
    match rng.next() % 10 {
        0..=5 => 1 + rng.next() % (64 << 10),
        6..=8 => (1 << 20) + rng.next() % (8 << 20),
        _ => (16 << 20) + rng.next() % (48 << 20),
    }
}

/// Live ranges handed out: start -> (end, size asked). Panics on overlap.
#[derive(Default)]
struct Shadow {
    live: BTreeMap<u64, (u64, u64)>,
    mallocs: u64,
    frees: u64,
}

impl Shadow {
    fn handed_out(&mut self, addr: DeviceAddr, size: u64) {
        let (start, end) = (addr.0, addr.0 + size);
        if let Some((&s, &(e, _))) = self.live.range(..end).next_back() {
            assert!(e <= start, "{addr} (+{size}) overlaps live range {s:#x}..{e:#x}");
        }
        self.live.insert(start, (end, size));
        self.mallocs += 1;
    }

    fn given_back(&mut self, addr: DeviceAddr, size: u64) {
        let (_, asked) = self.live.remove(&addr.0).unwrap_or_else(|| panic!("{addr} freed but not live"));
        assert_eq!(asked, size);
        self.frees += 1;
    }
}

#[test]
fn eight_threads_share_one_allocator_without_losing_or_doubling_a_block() {
    // 6 GiB: enough pressure that some mallocs free cached segments and retry.
    let shared = SharedAllocator::new(SimDevice::new(6 << 30), AllocatorConfig::pytorch_default(), 0);
    let shadow = Mutex::new(Shadow::default());
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel::<(DeviceAddr, u64)>()).unzip();

    std::thread::scope(|scope| {
        for (t, receiver) in receivers.into_iter().enumerate() {
            let next = senders[(t + 1) % THREADS].clone();
            let (shared, shadow) = (&shared, &shadow);
            scope.spawn(move || {
                let mut rng = XorShift::new(0x9e37_79b9_7f4a_7c15 ^ ((t as u64 + 1) * 0x1234_5678));
                let stream = StreamId(t as u64 % 3);
                let mut mine: Vec<(DeviceAddr, u64)> = Vec::new();
                for _ in 0..OPS_PER_THREAD {
                    // Frees sent by the previous thread: blocks it allocated.
                    while let Ok((addr, size)) = receiver.try_recv() {
                        shadow.lock().unwrap().given_back(addr, size);
                        shared.free(addr, size).expect("free of a block from another thread");
                    }
                    if mine.len() < 24 && rng.next() % 3 != 0 {
                        let size = size(&mut rng);
                        match shared.malloc(size, stream) {
                            Ok(addr) => {
                                shadow.lock().unwrap().handed_out(addr, size);
                                mine.push((addr, size));
                            }
                            Err(error) => assert!(error.as_oom().is_some(), "{error}"),
                        }
                    } else if !mine.is_empty() {
                        let (addr, size) = mine.swap_remove((rng.next() % mine.len() as u64) as usize);
                        if rng.next() % 2 == 0 {
                            next.send((addr, size)).unwrap(); // freed by the next thread
                        } else {
                            shadow.lock().unwrap().given_back(addr, size);
                            shared.free(addr, size).expect("free");
                        }
                    }
                }
                for (addr, size) in mine {
                    next.send((addr, size)).unwrap();
                }
                drop(next);
                // Drain until every sender to this thread is gone.
                for (addr, size) in receiver {
                    shadow.lock().unwrap().given_back(addr, size);
                    shared.free(addr, size).expect("free at the end");
                }
            });
        }
        drop(senders);
    });

    let shadow = shadow.into_inner().unwrap();
    assert!(shadow.mallocs > 1000, "only {} mallocs", shadow.mallocs);
    assert!(shadow.live.is_empty(), "{} blocks lost", shadow.live.len());
    assert_eq!(shadow.frees, shadow.mallocs);
    assert_eq!(shared.live_count(), 0);
    assert_eq!(shared.boundary_error_count(), 0);

    let stats = shared.stats();
    assert_eq!(stats.allocation.all.current, 0);
    assert_eq!(stats.allocated_bytes.all.current, 0);
    assert_eq!(stats.active_bytes.all.current, 0);
    assert_eq!(stats.requested_bytes.all.current, 0);
    assert_eq!(stats.allocation.all.allocated as u64, shadow.mallocs);
    assert_eq!(stats.allocation.all.freed as u64, shadow.frees);
    let (device_bytes, reserved) = shared
        .with_allocator(|alloc| {
            alloc.check_invariants().expect("invariants");
            (alloc.device().used_bytes(), alloc.stats().reserved_bytes.all.current as u64)
        })
        .unwrap();
    assert_eq!(device_bytes, reserved, "device bytes == reserved bytes");
    shared.empty_cache().unwrap();
    assert_eq!(shared.stats().reserved_bytes.all.current, 0);
    assert_eq!(shared.with_allocator(|alloc| alloc.device().used_bytes()).unwrap(), 0);
}
