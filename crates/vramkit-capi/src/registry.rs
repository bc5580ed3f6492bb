//! The process-wide state behind the C entry points: the backend chosen
//! once, the settings for devices not created yet, and one
//! [`SharedAllocator`] per device index, created on first use (so a
//! device the program never allocates on gets no CUDA context).

use crate::settings::{backend_from_env, config_from_env, Backend};
use crate::{Error, SharedAllocator};
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use vramkit_core::{AllocatorConfig, Device, DeviceAddr, DeviceStats, HistoryConfig, Snapshot, StreamId};
use vramkit_cuda::CudaDevice;
use vramkit_sim::SimDevice;

/// Device indices served: 0 to 63.
pub(crate) const MAX_DEVICES: usize = 64;

/// Where simulated device `d`'s addresses start: 16 TiB apart, so an
/// address names its device, as on real GPUs with unified addressing.
fn sim_base_address(device: usize) -> u64 {
    (device as u64 + 1) << 44
}

/// The object-safe face of a `SharedAllocator<D>`, whatever `D` is.
pub(crate) trait FrontEnd: Send + Sync {
    fn free(&self, addr: DeviceAddr, size_bytes: u64) -> Result<(), Error>;
    fn contains(&self, addr: DeviceAddr) -> bool;
    fn record_stream(&self, addr: DeviceAddr, stream: StreamId) -> Result<(), Error>;
    fn empty_cache(&self) -> Result<(), Error>;
    fn reset_peak_stats(&self) -> Result<(), Error>;
    fn reset_accumulated_stats(&self) -> Result<(), Error>;
    fn set_memory_fraction(&self, fraction: f64) -> Result<(), Error>;
    fn update_settings(&self, conf: &str) -> Result<(), Error>;
    fn record_history(&self, config: Option<HistoryConfig>) -> Result<(), Error>;
    fn memory_stats(&self) -> BTreeMap<String, i64>;
    fn memory_summary(&self, abbreviated: bool) -> String;
    fn snapshot(&self) -> Snapshot;
}

impl<D: Device + Send> FrontEnd for SharedAllocator<D> {
    fn free(&self, addr: DeviceAddr, size_bytes: u64) -> Result<(), Error> {
        SharedAllocator::free(self, addr, size_bytes)
    }
    fn contains(&self, addr: DeviceAddr) -> bool {
        SharedAllocator::contains(self, addr)
    }
    fn record_stream(&self, addr: DeviceAddr, stream: StreamId) -> Result<(), Error> {
        SharedAllocator::record_stream(self, addr, stream)
    }
    fn empty_cache(&self) -> Result<(), Error> {
        SharedAllocator::empty_cache(self)
    }
    fn reset_peak_stats(&self) -> Result<(), Error> {
        SharedAllocator::reset_peak_stats(self)
    }
    fn reset_accumulated_stats(&self) -> Result<(), Error> {
        SharedAllocator::reset_accumulated_stats(self)
    }
    fn set_memory_fraction(&self, fraction: f64) -> Result<(), Error> {
        SharedAllocator::set_memory_fraction(self, fraction)
    }
    fn update_settings(&self, conf: &str) -> Result<(), Error> {
        SharedAllocator::update_settings(self, conf)
    }
    fn record_history(&self, config: Option<HistoryConfig>) -> Result<(), Error> {
        SharedAllocator::record_history(self, config)
    }
    fn memory_stats(&self) -> BTreeMap<String, i64> {
        SharedAllocator::memory_stats(self)
    }
    fn memory_summary(&self, abbreviated: bool) -> String {
        SharedAllocator::memory_summary(self, abbreviated)
    }
    fn snapshot(&self) -> Snapshot {
        SharedAllocator::snapshot(self)
    }
}

/// A device's allocator, by backend: a concrete type, so that the
/// malloc/free pair of the C entry points is inlined into them, with no
/// call through a vtable; everything else goes through [`FrontEnd`].
pub(crate) enum Front {
    Cuda(Box<SharedAllocator<CudaDevice>>),
    Sim(Box<SharedAllocator<SimDevice>>),
}

impl Front {
    /// The allocator as a [`FrontEnd`], for the calls that are not the pair.
    pub(crate) fn as_dyn(&self) -> &dyn FrontEnd {
        match self {
            Front::Cuda(front) => front.as_ref(),
            Front::Sim(front) => front.as_ref(),
        }
    }

    /// [`SharedAllocator::malloc`].
    #[inline(always)]
    pub(crate) fn malloc(&self, size_bytes: u64, stream: StreamId) -> Result<DeviceAddr, Error> {
        match self {
            Front::Cuda(front) => front.malloc(size_bytes, stream),
            Front::Sim(front) => front.malloc(size_bytes, stream),
        }
    }

    /// [`SharedAllocator::free`].
    #[inline(always)]
    pub(crate) fn free(&self, addr: DeviceAddr, size_bytes: u64) -> Result<(), Error> {
        match self {
            Front::Cuda(front) => front.free(addr, size_bytes),
            Front::Sim(front) => front.free(addr, size_bytes),
        }
    }
}

pub(crate) struct Registry {
    backend: Backend,
    /// Settings for devices created from now on; `vramkit_set_settings`
    /// updates it and every existing device.
    config: Mutex<AllocatorConfig>,
    devices: [OnceLock<Front>; MAX_DEVICES],
    /// Why a device could not be created (tried once, remembered).
    failures: [OnceLock<String>; MAX_DEVICES],
    /// Serialises device creation.
    creating: Mutex<()>,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

/// The registry, set up from the environment on first use.
pub(crate) fn registry() -> &'static Registry {
    REGISTRY.get_or_init(|| Registry::new(backend_from_env()))
}

/// Chooses the backend before first use. Choosing the one already in use is
/// fine; changing it afterwards is refused.
pub(crate) fn select_backend(backend: Backend) -> Result<(), Error> {
    let registry = REGISTRY.get_or_init(|| Registry::new(backend));
    if registry.backend == backend {
        Ok(())
    } else {
        Err(Error::BackendFixed { current: registry.backend, requested: backend })
    }
}

impl Registry {
    fn new(backend: Backend) -> Registry {
        Registry {
            backend,
            config: Mutex::new(config_from_env()),
            devices: [const { OnceLock::new() }; MAX_DEVICES],
            failures: [const { OnceLock::new() }; MAX_DEVICES],
            creating: Mutex::new(()),
        }
    }

    fn slot(device: i32) -> Result<usize, Error> {
        usize::try_from(device).ok().filter(|&d| d < MAX_DEVICES).ok_or_else(|| Error::NoDevice {
            device,
            reason: format!("device indices run from 0 to {}", MAX_DEVICES - 1),
        })
    }

    /// Where memory comes from.
    pub(crate) fn backend(&self) -> Backend {
        self.backend
    }

    /// The settings devices are created with.
    pub(crate) fn config(&self) -> AllocatorConfig {
        self.config.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The allocator of `device` if it exists already; never creates one.
    pub(crate) fn existing(&self, device: i32) -> Option<&dyn FrontEnd> {
        self.existing_front(device).map(Front::as_dyn)
    }

    /// `existing`, as the concrete [`Front`] (for the malloc/free pair).
    #[inline]
    pub(crate) fn existing_front(&self, device: i32) -> Option<&Front> {
        let slot = Self::slot(device).ok()?;
        self.devices[slot].get()
    }

    /// Every existing allocator with its device index.
    pub(crate) fn all_existing(&self) -> impl Iterator<Item = (i32, &dyn FrontEnd)> {
        self.devices.iter().enumerate().filter_map(|(d, slot)| slot.get().map(|front| (d as i32, front.as_dyn())))
    }

    /// The existing device other than `except` where `addr` is live.
    pub(crate) fn owner_of(&self, addr: DeviceAddr, except: Option<i32>) -> Option<(i32, &dyn FrontEnd)> {
        self.all_existing().find(|&(d, front)| Some(d) != except && front.contains(addr))
    }

    /// The allocator of `device`, created on first use. A device that cannot
    /// be created prints why once and keeps failing with the same reason.
    pub(crate) fn device(&self, device: i32) -> Result<&dyn FrontEnd, Error> {
        self.device_front(device).map(Front::as_dyn)
    }

    /// `device`, as the concrete [`Front`] (for the malloc/free pair).
    #[inline]
    pub(crate) fn device_front(&self, device: i32) -> Result<&Front, Error> {
        match usize::try_from(device).ok().and_then(|slot| self.devices.get(slot)?.get()) {
            Some(front) => Ok(front),
            None => self.first_use(device),
        }
    }

    /// `device` when it has no allocator yet: made here, once.
    #[cold]
    fn first_use(&self, device: i32) -> Result<&Front, Error> {
        let slot = Self::slot(device)?;
        let _creating = self.creating.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(front) = self.devices[slot].get() {
            return Ok(front);
        }
        if let Some(reason) = self.failures[slot].get() {
            return Err(Error::NoDevice { device, reason: reason.clone() });
        }
        match self.create(device) {
            Ok(front) => Ok(self.devices[slot].get_or_init(|| front)),
            Err(reason) => {
                eprintln!("vramkit: cannot use device {device}: {reason}");
                let reason = self.failures[slot].get_or_init(|| reason);
                Err(Error::NoDevice { device, reason: reason.clone() })
            }
        }
    }

    fn create(&self, device: i32) -> Result<Front, String> {
        let config = self.config();
        match self.backend {
            Backend::Cuda => match CudaDevice::new(device) {
                Ok(cuda) => Ok(Front::Cuda(Box::new(SharedAllocator::new(cuda, config, device)))),
                Err(error) => Err(format!("{error} (set VRAMKIT_DEVICE=sim for a simulated GPU)")),
            },
            Backend::Sim { capacity_bytes } => {
                let sim = SimDevice::new(capacity_bytes).with_base_address(sim_base_address(device as usize));
                Ok(Front::Sim(Box::new(SharedAllocator::new(sim, config, device))))
            }
        }
    }

    /// Applies a settings string to every existing device and to the
    /// settings of devices created later. Nothing changes if it is refused.
    pub(crate) fn update_settings(&self, conf: &str) -> Result<(), Error> {
        let mut config = self.config.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = config.clone();
        next.update(conf).map_err(vramkit_core::Error::from)?;
        for (_, front) in self.all_existing() {
            front.update_settings(conf)?;
        }
        *config = next;
        Ok(())
    }

    /// Statistics of a device that has no allocator yet: all zero.
    pub(crate) fn empty_stats(&self) -> DeviceStats {
        let config = self.config();
        DeviceStats { max_split_size: config.max_split_size_bytes.map_or(-1, |b| b as i64), ..DeviceStats::default() }
    }

    /// Checks a device index without creating anything.
    pub(crate) fn check_index(device: i32) -> Result<(), Error> {
        Self::slot(device).map(|_| ())
    }
}
