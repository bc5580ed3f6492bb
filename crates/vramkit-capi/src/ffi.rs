//! The C entry points. `include/vramkit.h` is generated from this file
//! (cbindgen; see `cbindgen.toml`), so the comments here are the C docs.
//!
//! Every body runs inside the panic boundary. Pointers and streams are
//! numbers to vramkit: it never dereferences device memory, and reads a
//! C string argument only where the function is `unsafe` and says so.

use crate::panic::boundary;
use crate::registry::{registry, select_backend, Registry};
use crate::settings::Backend;
use crate::{process, report, Error};
use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Mutex, PoisonError};
use vramkit_core::{DeviceAddr, StreamId};

/// Strings handed out and not yet given back to `vramkit_free_string`, by
/// address, so that freeing anything else is refused instead of undefined.
static HANDED_OUT_STRINGS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

/// Hands `text` to C as a NUL-terminated UTF-8 string.
fn hand_out(text: String) -> *mut c_char {
    let text = CString::new(text).unwrap_or_else(|e| {
        let mut bytes = e.into_vec();
        bytes.retain(|&b| b != 0);
        CString::new(bytes).expect("no NUL left")
    });
    let ptr = text.into_raw();
    HANDED_OUT_STRINGS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashSet::new)
        .insert(ptr as usize);
    ptr
}

/// Reads a C string argument.
///
/// # Safety
/// `text` is null or points to a NUL-terminated string that stays valid and
/// unchanged for the duration of the call.
unsafe fn read_str<'a>(call: &'static str, text: *const c_char) -> Result<&'a str, Error> {
    if text.is_null() {
        return Err(Error::InvalidArgument { call, reason: "the string is NULL".into() });
    }
    // SAFETY: not null (checked), and NUL-terminated and valid for the call
    // (the caller's premise).
    let text = unsafe { CStr::from_ptr(text) };
    text.to_str().map_err(|e| Error::InvalidArgument { call, reason: format!("the string is not UTF-8: {e}") })
}

fn stream_id(stream: *mut c_void) -> StreamId {
    StreamId(stream as usize as u64)
}

/// Allocates `size` bytes on CUDA device `device` for use on `stream` (a
/// `cudaStream_t`). The signature PyTorch's `CUDAPluggableAllocator` loads.
///
/// Returns NULL for `size == 0` (no error), and NULL after printing
/// PyTorch's out-of-memory message and vramkit's diagnosis to stderr when
/// the memory cannot be found even after releasing the cache.
#[no_mangle]
pub extern "C" fn vramkit_malloc(size: usize, device: c_int, stream: *mut c_void) -> *mut c_void {
    boundary("vramkit_malloc", || {
        if size == 0 {
            return std::ptr::null_mut();
        }
        let result = registry().device_front(device).and_then(|front| front.malloc(size as u64, stream_id(stream)));
        match result {
            Ok(addr) => addr.0 as usize as *mut c_void,
            Err(error) => malloc_failed(size, device, error),
        }
    })
}

/// `vramkit_malloc` that found no memory or no device: reports why and
/// returns NULL (out of line, so that the pair's frame stays small).
#[cold]
#[inline(never)]
fn malloc_failed(size: usize, device: c_int, error: Error) -> *mut c_void {
    match error {
        // A device that could not be created printed why, once.
        Error::NoDevice { .. } if Registry::check_index(device).is_ok() => {}
        error => report::error(&format!("vramkit_malloc({size} bytes, device {device}) returns NULL"), &error),
    }
    std::ptr::null_mut()
}

/// Frees `ptr`, which `vramkit_malloc(size, device, stream)` returned. The
/// signature PyTorch's `CUDAPluggableAllocator` loads.
///
/// Misuse never corrupts the allocator: a NULL pointer with a non-zero size,
/// a pointer already freed, or one vramkit never returned is refused; a
/// wrong size or device still frees the block the pointer names. Each
/// prints one line to stderr and counts in `vramkit_boundary_errors()`.
/// `vramkit_free(NULL, 0, ...)` (the pair of a zero-byte malloc) is fine.
#[no_mangle]
pub extern "C" fn vramkit_free(ptr: *mut c_void, size: usize, device: c_int, stream: *mut c_void) {
    boundary("vramkit_free", || {
        let _ = stream; // The block remembers its stream; PyTorch passes the same one back.
        let addr = DeviceAddr(ptr as usize as u64);
        let size = size as u64;
        let registry = registry();
        let refused = match registry.existing_front(device) {
            Some(front) => match front.free(addr, size) {
                // The pair's path: nothing to report, no result to carry on.
                Ok(()) => return,
                Err(error) => Some(error),
            },
            None => None,
        };
        free_elsewhere(registry, refused, addr, size, device);
    })
}

/// `vramkit_free` off the pair's path (out of line, so that the pair's
/// frame stays small): the device's allocator refused the free
/// (`refused`), or the device has none.
#[cold]
#[inline(never)]
fn free_elsewhere(registry: &Registry, refused: Option<Error>, addr: DeviceAddr, size: u64, device: c_int) {
    let call = "vramkit_free";
    let result = match refused {
        Some(Error::UnknownPointer { .. } | Error::DoubleFree { .. }) if registry.owner_of(addr, Some(device)).is_some() => {
            free_on_owner(registry, addr, size, device)
        }
        Some(other) => Err(other),
        None if addr.0 == 0 && size == 0 => Ok(()),
        None if addr.0 == 0 => Err(Error::NullPointer { size_bytes: size }),
        None => match Registry::check_index(device) {
            Ok(()) => free_on_owner(registry, addr, size, device),
            Err(_) => match registry.owner_of(addr, None) {
                Some(_) => free_on_owner(registry, addr, size, device),
                None => Err(Error::InvalidArgument {
                    call,
                    reason: format!("device {device} is not a device index vramkit serves, and {addr} is not live on any device; nothing was freed"),
                }),
            },
        },
    };
    if let Err(error) = result {
        report::error(call, &error);
    }
}

/// The pointer is not live on `device`: free it on the device where it is,
/// reporting the wrong device, or refuse it as unknown.
fn free_on_owner(registry: &Registry, addr: DeviceAddr, size: u64, device: c_int) -> Result<(), Error> {
    let Some((owner, front)) = registry.owner_of(addr, Some(device)) else {
        return Err(Error::UnknownPointer { addr, device });
    };
    report::error("vramkit_free", &Error::WrongDevice { addr, device, owner });
    front.free(addr, size)
}

/// `torch.cuda.empty_cache()`: returns every wholly free cached segment of
/// every device to the driver. Usable as the pluggable allocator's reset hook.
#[no_mangle]
pub extern "C" fn vramkit_empty_cache() {
    boundary("vramkit_empty_cache", || {
        for (_, front) in registry().all_existing() {
            if let Err(error) = front.empty_cache() {
                report::error("vramkit_empty_cache", &error);
            }
        }
    })
}

/// `Tensor.record_stream(stream)`: the live block at `ptr` is also used on
/// `stream`, so after it is freed it is not reused until the work queued on
/// `stream` so far has finished. The signature of the pluggable allocator's
/// record-stream hook. An unknown pointer prints one line and counts as a
/// boundary error.
#[no_mangle]
pub extern "C" fn vramkit_record_stream(ptr: *mut c_void, stream: *mut c_void) {
    boundary("vramkit_record_stream", || {
        let addr = DeviceAddr(ptr as usize as u64);
        let result = match registry().owner_of(addr, None) {
            Some((_, front)) => front.record_stream(addr, stream_id(stream)),
            None => Err(Error::NotLive { call: "record_stream", addr }),
        };
        if let Err(error) = result {
            report::error("vramkit_record_stream", &error);
        }
    })
}

/// `torch.cuda.set_per_process_memory_fraction(fraction, device)`: caps the
/// device's reserved memory at `fraction` (0 to 1) of its total. The
/// signature of the pluggable allocator's memory-fraction hook.
#[no_mangle]
pub extern "C" fn vramkit_set_memory_fraction(fraction: f64, device: c_int) {
    boundary("vramkit_set_memory_fraction", || {
        if let Err(error) = registry().device(device).and_then(|front| front.set_memory_fraction(fraction)) {
            report::error("vramkit_set_memory_fraction", &error);
        }
    })
}

/// `torch.cuda.reset_peak_memory_stats(device)`.
#[no_mangle]
pub extern "C" fn vramkit_reset_peak_stats(device: c_int) {
    boundary("vramkit_reset_peak_stats", || {
        if let Some(Err(error)) = registry().existing(device).map(|front| front.reset_peak_stats()) {
            report::error("vramkit_reset_peak_stats", &error);
        }
    })
}

/// `torch.cuda.reset_accumulated_memory_stats(device)`.
#[no_mangle]
pub extern "C" fn vramkit_reset_accumulated_stats(device: c_int) {
    boundary("vramkit_reset_accumulated_stats", || {
        if let Some(Err(error)) = registry().existing(device).map(|front| front.reset_accumulated_stats()) {
            report::error("vramkit_reset_accumulated_stats", &error);
        }
    })
}

/// Applies a `PYTORCH_CUDA_ALLOC_CONF`-style string (e.g.
/// `"max_split_size_mb:128,garbage_collection_threshold:0.8"`) to every
/// device, now and later. Only the keys named change. Returns 0, or -1
/// after printing why the string was refused (then nothing changed).
///
/// # Safety
/// `settings` is NULL or a NUL-terminated string valid for the call.
#[no_mangle]
pub unsafe extern "C" fn vramkit_set_settings(settings: *const c_char) -> c_int {
    boundary("vramkit_set_settings", || {
        // SAFETY: `settings` is NULL or a valid NUL-terminated string (this
        // function's premise).
        let result =
            unsafe { read_str("vramkit_set_settings", settings) }.and_then(|conf| registry().update_settings(conf));
        match result {
            Ok(()) => 0,
            Err(error) => {
                report::error("vramkit_set_settings", &error);
                -1
            }
        }
    })
}

/// `torch.cuda.memory_stats(device)` as a JSON object of every key
/// (`"allocated_bytes.all.current"`, ..., `"num_ooms"`, ...). All zero for a
/// device not used yet. Free the string with `vramkit_free_string`; NULL for
/// an invalid device index.
#[no_mangle]
pub extern "C" fn vramkit_memory_stats(device: c_int) -> *mut c_char {
    boundary("vramkit_memory_stats", || {
        match process::memory_stats(device) {
            Ok(stats) => hand_out(serde_json::to_string(&stats).expect("a map of integers serialises")),
            Err(error) => {
                report::error("vramkit_memory_stats", &error);
                std::ptr::null_mut()
            }
        }
    })
}

/// `torch.cuda.memory_summary(device, abbreviated)`: PyTorch 2's table.
/// Free the string with `vramkit_free_string`; NULL for an invalid device.
#[no_mangle]
pub extern "C" fn vramkit_memory_summary(device: c_int, abbreviated: c_int) -> *mut c_char {
    boundary("vramkit_memory_summary", || {
        match process::memory_summary(device, abbreviated != 0) {
            Ok(text) => hand_out(text),
            Err(error) => {
                report::error("vramkit_memory_summary", &error);
                std::ptr::null_mut()
            }
        }
    })
}

/// `torch.cuda.memory._snapshot()` of every device as JSON, in PyTorch's
/// dict shape (`segments`, `device_traces`, `allocator_settings`), which
/// pytorch.org/memory_viz opens. Pickle output is not provided yet. Free the
/// string with `vramkit_free_string`.
#[no_mangle]
pub extern "C" fn vramkit_snapshot() -> *mut c_char {
    boundary("vramkit_snapshot", || {
        hand_out(process::snapshot().to_string())
    })
}

/// Starts (`enabled != 0`) or stops and clears the history of allocator
/// events on `device` that `vramkit_snapshot` reports in `device_traces`;
/// `max_entries` bounds the ring buffer (0: unbounded). Returns 0 or -1.
#[no_mangle]
pub extern "C" fn vramkit_record_history(device: c_int, enabled: c_int, max_entries: usize) -> c_int {
    boundary("vramkit_record_history", || {
        match process::record_history(device, enabled != 0, (max_entries != 0).then_some(max_entries)) {
            Ok(()) => 0,
            Err(error) => {
                report::error("vramkit_record_history", &error);
                -1
            }
        }
    })
}

/// Gives back a string from `vramkit_memory_stats`, `vramkit_memory_summary`
/// or `vramkit_snapshot`. NULL is ignored; any other pointer vramkit did not
/// hand out (or that was given back already) is refused with one line on
/// stderr and counted in `vramkit_boundary_errors()`.
// Safe to call with any pointer: it is reclaimed only when the set of
// handed-out strings holds it, so clippy's worry does not apply.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
#[no_mangle]
pub extern "C" fn vramkit_free_string(text: *mut c_char) {
    boundary("vramkit_free_string", || {
        if text.is_null() {
            return;
        }
        let known = HANDED_OUT_STRINGS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            .is_some_and(|set| set.remove(&(text as usize)));
        if known {
            // SAFETY: `text` came from `CString::into_raw` in `hand_out` (it
            // was in the set) and is taken out of the set exactly once here,
            // so it is reclaimed once.
            drop(unsafe { CString::from_raw(text) });
        } else {
            report::error("vramkit_free_string", &Error::UnknownString { addr: DeviceAddr(text as usize as u64) });
        }
    })
}

/// Boundary misuse reported since the library was loaded: bad frees (NULL,
/// double, unknown pointer, wrong size or device), `record_stream` of an
/// unknown pointer, strings not from vramkit, invalid string arguments.
#[no_mangle]
pub extern "C" fn vramkit_boundary_errors() -> u64 {
    boundary("vramkit_boundary_errors", report::misuse_count)
}

/// Chooses where memory comes from, before any other call: `"cuda"` (real
/// GPUs, the default), `"sim"` (a simulated 80 GiB GPU per device index) or
/// `"sim:<capacity>"` (e.g. `"sim:8GiB"`). Without this call the
/// `VRAMKIT_DEVICE` environment variable decides, else `cuda`. Returns 0,
/// or -1 after printing why (unknown name, or another backend already in use).
///
/// # Safety
/// `backend` is NULL or a NUL-terminated string valid for the call.
#[no_mangle]
pub unsafe extern "C" fn vramkit_select_backend(backend: *const c_char) -> c_int {
    boundary("vramkit_select_backend", || {
        // SAFETY: `backend` is NULL or a valid NUL-terminated string (this
        // function's premise).
        let result = unsafe { read_str("vramkit_select_backend", backend) }.and_then(|name| {
            let choice = Backend::parse(name)
                .map_err(|reason| Error::InvalidArgument { call: "vramkit_select_backend", reason })?;
            select_backend(choice)
        });
        match result {
            Ok(()) => 0,
            Err(error) => {
                report::error("vramkit_select_backend", &error);
                -1
            }
        }
    })
}

/// The library's version, e.g. `"0.1.0"` (static; do not free).
#[no_mangle]
pub extern "C" fn vramkit_version() -> *const c_char {
    boundary("vramkit_version", || VERSION.as_ptr())
}

static VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
    Ok(version) => version,
    Err(_) => panic!("the version has no NUL inside"),
};
