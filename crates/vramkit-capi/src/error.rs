//! The crate's error type: what a front-end call can refuse.

use vramkit_core::DeviceAddr;

/// Why a [`SharedAllocator`](crate::SharedAllocator) or C entry point call
/// did not do what it was asked.
///
/// The misuse variants ([`Error::is_misuse`]) are mistakes of the caller at
/// the boundary. They never corrupt the allocator: the call either does
/// nothing or, where the address names a live block without doubt
/// ([`Error::WrongSize`], [`Error::WrongDevice`]), frees that block.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The allocator refused: out of memory, a device error, a bad setting.
    #[error(transparent)]
    Allocator(#[from] vramkit_core::Error),
    /// `free(NULL, size)` with a non-zero size. (`free(NULL, 0)` is the
    /// pair of a zero-byte `malloc`, which returns null, and is silent.)
    #[error("free of a null pointer with size {size_bytes}: vramkit never returns null for a non-zero size; nothing was freed")]
    NullPointer {
        /// The size passed.
        size_bytes: u64,
    },
    /// The address was handed out here and already freed.
    #[error("double free of {addr} on device {device}: it was already freed; nothing was freed")]
    DoubleFree {
        /// The address passed.
        addr: DeviceAddr,
        /// The device the call named.
        device: i32,
    },
    /// The address is not one vramkit handed out (on this device).
    #[error("{addr} was never handed out by vramkit on device {device} (not a pointer from vramkit_malloc, or an interior pointer); nothing was freed")]
    UnknownPointer {
        /// The address passed.
        addr: DeviceAddr,
        /// The device the call named.
        device: i32,
    },
    /// `record_stream` of an address that is not a live block on any device.
    #[error("{call} of {addr}: not a live block from vramkit (never handed out, or already freed); nothing was done")]
    NotLive {
        /// The entry point.
        call: &'static str,
        /// The address passed.
        addr: DeviceAddr,
    },
    /// `vramkit_free_string` of a pointer that is not a string vramkit
    /// handed out, or one given back already.
    #[error("{addr} is not a string vramkit handed out, or it was given back already; nothing was freed")]
    UnknownString {
        /// The pointer passed.
        addr: DeviceAddr,
    },
    /// The size passed to `free` is not the size `malloc` was called with.
    /// The block was freed anyway: the address names it.
    #[error(
        "free of {addr} with size {size_bytes}, but it was allocated with size {allocated_bytes}; freed it anyway"
    )]
    WrongSize {
        /// The address passed.
        addr: DeviceAddr,
        /// The size passed.
        size_bytes: u64,
        /// The size it was allocated with.
        allocated_bytes: u64,
    },
    /// The address is live on another device than the one the call named.
    /// The block was freed on its own device.
    #[error("free of {addr} on device {device}, but it was allocated on device {owner}; freed it on device {owner}")]
    WrongDevice {
        /// The address passed.
        addr: DeviceAddr,
        /// The device the call named.
        device: i32,
        /// The device it was allocated on.
        owner: i32,
    },
    /// A panic inside this device's allocator left its state unknown, so it
    /// refuses further changes rather than risk handing out memory twice.
    #[error("device {device}'s allocator stopped after a panic inside it; restart the process")]
    Poisoned {
        /// The device.
        device: i32,
    },
    /// No device can serve this call.
    #[error("no allocator for device {device}: {reason}")]
    NoDevice {
        /// The device the call named.
        device: i32,
        /// Why: no driver, no such GPU, a bad `VRAMKIT_DEVICE`, ...
        reason: String,
    },
    /// `vramkit_select_backend` after another backend was chosen: it is
    /// fixed at first use, since live blocks belong to it.
    #[error(
        "the backend is already {current} (chosen at first use); select {requested} before any other vramkit call"
    )]
    BackendFixed {
        /// The backend in use.
        current: crate::Backend,
        /// The one asked for.
        requested: crate::Backend,
    },
    /// A string argument was null or not UTF-8, or a backend name unknown.
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// The entry point.
        call: &'static str,
        /// What was wrong.
        reason: String,
    },
}

impl Error {
    /// A mistake of the caller at the boundary (a bad pointer, size or
    /// device), as opposed to a refusal of the allocator.
    pub fn is_misuse(&self) -> bool {
        matches!(
            self,
            Error::NullPointer { .. }
                | Error::DoubleFree { .. }
                | Error::UnknownPointer { .. }
                | Error::NotLive { .. }
                | Error::UnknownString { .. }
                | Error::WrongSize { .. }
                | Error::WrongDevice { .. }
                | Error::InvalidArgument { .. }
        )
    }

    /// The out-of-memory details, if this is one.
    pub fn as_oom(&self) -> Option<&vramkit_core::OutOfMemoryError> {
        match self {
            Error::Allocator(error) => error.as_oom(),
            _ => None,
        }
    }
}
