//! `AllocatorLock`: the lock around one device's allocator, made for
//! critical sections of a few tens of nanoseconds.
//!
//! `std::sync::Mutex` takes two atomic read-modify-writes per call: one to
//! lock, one to unlock (which must learn whether a thread sleeps on the
//! futex, to wake it). The malloc/free pair of the C entry points is two
//! calls, so four such instructions, about 6 ns of a 36 ns pair here
//! (BENCHMARKS.md). This lock takes one: a compare-exchange to lock, and a
//! plain release store to unlock. No thread ever sleeps where the unlock
//! would have to wake it; a thread that finds the lock taken spins a
//! little (the holder is usually done within 100 ns), then yields, then
//! sleeps in short, growing naps (at most [`MAX_NAP`]) and looks again. A
//! holder that is slow (a `cudaMalloc`, an `empty_cache()`, a snapshot)
//! costs a waiter at most one nap of latency and next to no CPU.
//!
//! Poisoning is `std`'s: a guard dropped while its thread panics marks
//! the lock, and every later `lock()` returns `Err(PoisonError)` with the
//! guard inside, so a caller chooses, as with `Mutex`, whether to refuse
//! (a change to an allocator that may be half way through an update) or go
//! on (a summary is what one wants then).

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LockResult, PoisonError};
use std::time::Duration;

/// Spins (with the CPU's pause hint) before a waiter starts yielding.
const SPINS: u32 = 100;
/// `yield_now` calls before a waiter starts to nap.
const YIELDS: u32 = 10;
/// The first nap; each next one doubles, up to [`MAX_NAP`].
const FIRST_NAP: Duration = Duration::from_micros(1);
/// The longest nap: the most a waiter oversleeps a lock freed meanwhile.
pub(crate) const MAX_NAP: Duration = Duration::from_micros(50);

/// A mutual-exclusion lock with `Mutex`'s interface and poisoning, whose
/// unlock is a plain store (see the module doc).
pub(crate) struct AllocatorLock<T> {
    locked: AtomicBool,
    poisoned: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands `&mut T` to one thread at a time (the guard exists
// only between a successful compare-exchange to `true` and the release
// store of `false`), so sharing the lock across threads shares `T` the way
// `Mutex<T>` does: it needs `T: Send`, not `T: Sync`.
unsafe impl<T: Send> Sync for AllocatorLock<T> {}

impl<T> AllocatorLock<T> {
    pub(crate) fn new(value: T) -> Self {
        AllocatorLock { locked: AtomicBool::new(false), poisoned: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Takes the lock, waiting as the module doc says. `Err` (with the
    /// guard) when a holder panicked: the value may be half way through a change.
    #[inline(always)]
    pub(crate) fn lock(&self) -> LockResult<AllocatorGuard<'_, T>> {
        if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_contended();
        }
        let guard = AllocatorGuard { lock: self, panicking: std::thread::panicking() };
        if self.poisoned.load(Ordering::Relaxed) {
            Err(PoisonError::new(guard))
        } else {
            Ok(guard)
        }
    }

    /// The lock was taken (or the weak exchange failed spuriously): spin,
    /// yield, then nap, looking with plain loads before each exchange.
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut tries = 0u32;
        let mut nap = FIRST_NAP;
        loop {
            if !self.locked.load(Ordering::Relaxed)
                && self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                return;
            }
            if tries < SPINS {
                std::hint::spin_loop();
            } else if tries < SPINS + YIELDS {
                std::thread::yield_now();
            } else {
                std::thread::sleep(nap);
                nap = (nap * 2).min(MAX_NAP);
            }
            tries = tries.saturating_add(1);
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for AllocatorLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not locked to print: a `{:?}` inside a held lock must not wait on itself.
        f.debug_struct("AllocatorLock")
            .field("locked", &self.locked.load(Ordering::Relaxed))
            .field("poisoned", &self.poisoned.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The lock held; dropping it unlocks.
pub(crate) struct AllocatorGuard<'a, T> {
    lock: &'a AllocatorLock<T>,
    /// Whether the thread was already panicking when it took the lock
    /// (then dropping the guard in that panic poisons nothing).
    panicking: bool,
}

impl<T: std::fmt::Debug> std::fmt::Debug for AllocatorGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AllocatorGuard").field(&**self).finish()
    }
}

impl<T> Deref for AllocatorGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock,
        // so no other reference to the value exists (see `Sync` above).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for AllocatorGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only borrow
        // through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for AllocatorGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        if !self.panicking && std::thread::panicking() {
            self.lock.poisoned.store(true, Ordering::Relaxed);
        }
        // Release: every write made under the lock is seen by the next
        // holder, whose exchange acquires.
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    /// Increments that are not atomic, made from four threads under the
    /// lock: a lost update would show in the sum. The counter is read and
    /// written in two steps with a yield between, so a second thread in
    /// the critical section would be caught, not merely possible.
    #[test]
    fn one_holder_at_a_time() {
        const THREADS: u64 = 4;
        const ROUNDS: u64 = 20_000;
        let lock = Arc::new(AllocatorLock::new((0u64, false)));
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                let lock = &lock;
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        let mut g = lock.lock().unwrap();
                        assert!(!g.1, "two threads hold the lock");
                        g.1 = true;
                        let seen = g.0;
                        if round % 64 == 0 {
                            std::thread::yield_now();
                        }
                        g.0 = seen + 1;
                        g.1 = false;
                    }
                });
            }
        });
        assert_eq!(lock.lock().unwrap().0, THREADS * ROUNDS);
    }

    /// A waiter behind a slow holder naps, and gets the lock soon after
    /// the holder lets it go.
    #[test]
    fn a_waiter_behind_a_slow_holder_gets_the_lock() {
        let lock = AllocatorLock::new(0u32);
        let held = lock.lock().unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let mut g = lock.lock().unwrap();
                *g += 1;
                Instant::now()
            });
            std::thread::sleep(Duration::from_millis(20));
            assert!(!waiter.is_finished(), "the waiter took a held lock");
            let released = Instant::now();
            drop(held);
            let taken = waiter.join().unwrap();
            // One nap at most, and the scheduler's slack.
            assert!(taken.duration_since(released) < Duration::from_millis(50));
        });
        assert_eq!(*lock.lock().unwrap(), 1);
    }

    /// A panic under the lock poisons it, as `Mutex` is poisoned: later
    /// holders get the value through `PoisonError`.
    #[test]
    fn a_panic_under_the_lock_poisons_it() {
        let lock = AllocatorLock::new(5u32);
        assert!(lock.lock().is_ok());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = lock.lock().unwrap();
            panic!("inside the lock");
        }));
        assert!(caught.is_err());
        let poisoned = lock.lock().expect_err("poisoned");
        assert_eq!(*poisoned.into_inner(), 5, "the value stays reachable");
        assert!(lock.lock().is_err(), "poisoning stays");
        assert!(!lock.locked.load(Ordering::Relaxed), "the panicking guard unlocked");
    }
}
