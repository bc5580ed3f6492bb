//! The panic boundary: no unwinding crosses into C.
//!
//! Every `extern "C"` body runs inside [`boundary`], which catches a panic,
//! prints one line naming the entry point, and returns a harmless value
//! (null, nothing, -1), as rustls-ffi's `ffi_panic_boundary!` does. The
//! panic's own message was already printed by the panic hook.

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The value an entry point returns when its body panicked.
pub(crate) trait OnPanic {
    /// The harmless value.
    fn on_panic() -> Self;
}

impl OnPanic for () {
    fn on_panic() -> Self {}
}

impl OnPanic for *mut c_void {
    fn on_panic() -> Self {
        std::ptr::null_mut()
    }
}

impl OnPanic for *mut c_char {
    fn on_panic() -> Self {
        std::ptr::null_mut()
    }
}

impl OnPanic for *const c_char {
    fn on_panic() -> Self {
        std::ptr::null()
    }
}

impl OnPanic for c_int {
    fn on_panic() -> Self {
        -1
    }
}

impl OnPanic for u64 {
    fn on_panic() -> Self {
        0
    }
}

/// Runs `body`; on a panic prints one line and returns `T::on_panic()`.
///
/// `AssertUnwindSafe` is sound here: the only state shared across a panic is
/// behind mutexes (poisoned by the panic, and a poisoned allocator refuses
/// changes) or atomics.
///
/// Inlined into each entry point, so the body is not a closure called
/// through a second frame (the malloc/free pair pays for every call).
#[inline(always)]
pub(crate) fn boundary<T: OnPanic>(entry_point: &'static str, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(_) => {
            eprintln!("vramkit: {entry_point} panicked (a vramkit bug; please report it); the call did nothing");
            T::on_panic()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_harmless_value() {
        let p: *mut c_void = boundary("test_entry", || panic!("boom"));
        assert!(p.is_null());
        let status: c_int = boundary("test_entry", || panic!("boom"));
        assert_eq!(status, -1);
        boundary::<()>("test_entry", || panic!("boom"));
        assert_eq!(boundary("test_entry", || 7u64), 7);
    }
}
