//! `AllocatorLock`: the lock around one device's allocator, made for
//! critical sections of a few tens of nanoseconds.
//!
//! `std::sync::Mutex` takes two atomic read-modify-writes per call: one to
//! lock, one to unlock (which must learn whether a thread sleeps on the
//! futex, to wake it). The malloc/free pair of the C entry points is two
//! calls, so four such instructions, about 6 ns of a 36 ns pair here
//! (BENCHMARKS.md). This lock takes one when nobody waits: a
//! compare-exchange to lock, and to unlock a load and a plain release
//! store.
//!
//! It is the classic three-state lock (unlocked, locked, locked with
//! waiters). A thread that finds it taken spins a little (the holder is
//! usually done within 100 ns), then marks it contended and sleeps on a
//! condition variable; an unlock that finds it contended wakes one
//! sleeper. The one wake-up this can miss is a waiter that marks the lock
//! between the unlock's load and its store: so sleepers wait at most
//! [`MAX_NAP`] and look again, which bounds the cost of that rare race.
//!
//! Poisoning is `std`'s: a guard dropped while its thread panics marks
//! the lock, and every later `lock()` returns `Err(PoisonError)` with the
//! guard inside, so a caller chooses, as with `Mutex`, whether to refuse
//! (a change to an allocator that may be half way through an update) or go
//! on (a summary is what one wants then).

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Condvar, LockResult, Mutex, PoisonError};
use std::time::Duration;

const UNLOCKED: u8 = 0;
const LOCKED: u8 = 1;
/// Locked, and a thread may sleep waiting for it.
const CONTENDED: u8 = 2;

/// Spins (with the CPU's pause hint) before a waiter sleeps.
const SPINS: u32 = 100;
/// The longest a sleeper waits before it looks again (see the module doc).
/// Long in tests, so that a sleeper no unlock wakes shows.
pub(crate) const MAX_NAP: Duration = if cfg!(test) { Duration::from_secs(1) } else { Duration::from_micros(100) };

/// A mutual-exclusion lock with `Mutex`'s interface and poisoning, whose
/// uncontended unlock is a plain store (see the module doc).
pub(crate) struct AllocatorLock<T> {
    state: AtomicU8,
    poisoned: AtomicBool,
    /// Where waiters sleep (the contended path only).
    sleepers: Mutex<()>,
    wake: Condvar,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands `&mut T` to one thread at a time (the guard exists
// only between a successful exchange from `UNLOCKED` and the release store
// of `UNLOCKED`), so sharing the lock across threads shares `T` the way
// `Mutex<T>` does: it needs `T: Send`, not `T: Sync`.
unsafe impl<T: Send> Sync for AllocatorLock<T> {}

impl<T> AllocatorLock<T> {
    pub(crate) fn new(value: T) -> Self {
        AllocatorLock {
            state: AtomicU8::new(UNLOCKED),
            poisoned: AtomicBool::new(false),
            sleepers: Mutex::new(()),
            wake: Condvar::new(),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, waiting as the module doc says. `Err` (with the
    /// guard) when a holder panicked: the value may be half way through a change.
    #[inline(always)]
    pub(crate) fn lock(&self) -> LockResult<AllocatorGuard<'_, T>> {
        if self.state.compare_exchange_weak(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_contended();
        }
        let guard = AllocatorGuard { lock: self, panicking: std::thread::panicking() };
        if self.poisoned.load(Ordering::Relaxed) {
            Err(PoisonError::new(guard))
        } else {
            Ok(guard)
        }
    }

    /// The lock was taken (or the weak exchange failed spuriously): spin a
    /// little, then mark it contended and sleep until an unlock wakes us
    /// (or [`MAX_NAP`] passes).
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        for _ in 0..SPINS {
            if self.state.load(Ordering::Relaxed) == UNLOCKED
                && self.state.compare_exchange_weak(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                return;
            }
            std::hint::spin_loop();
        }
        loop {
            // Taken this way the lock stays marked contended: its unlock
            // then wakes a sleeper that may not exist (harmless).
            if self.state.swap(CONTENDED, Ordering::Acquire) == UNLOCKED {
                return;
            }
            let sleepers = self.sleepers.lock().unwrap_or_else(PoisonError::into_inner);
            // An unlock stores UNLOCKED before it takes `sleepers` to wake
            // someone: seen here, there is nothing to wait for.
            if self.state.load(Ordering::Relaxed) == CONTENDED {
                let _ = self.wake.wait_timeout(sleepers, MAX_NAP);
            }
        }
    }

    /// The unlock of a lock marked contended: wakes one sleeper.
    #[cold]
    #[inline(never)]
    fn unlock_contended(&self) {
        self.state.store(UNLOCKED, Ordering::Release);
        let _sleepers = self.sleepers.lock().unwrap_or_else(PoisonError::into_inner);
        self.wake.notify_one();
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for AllocatorLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not locked to print: a `{:?}` inside a held lock must not wait on itself.
        f.debug_struct("AllocatorLock")
            .field("state", &self.state.load(Ordering::Relaxed))
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
        // holder, whose exchange acquires. Nobody marked it contended: no
        // read-modify-write (a waiter marking it just now may sleep one
        // `MAX_NAP`, see the module doc).
        if self.lock.state.load(Ordering::Relaxed) == LOCKED {
            self.lock.state.store(UNLOCKED, Ordering::Release);
        } else {
            self.lock.unlock_contended();
        }
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

    /// A waiter behind a slow holder sleeps, and is woken when the holder
    /// lets the lock go.
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
            // Woken by the unlock (a nap is a second in tests), and the
            // scheduler's slack.
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
        assert_eq!(lock.state.load(Ordering::Relaxed), UNLOCKED, "the panicking guard unlocked");
    }
}
