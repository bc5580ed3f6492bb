//! The torch releases the harness is built for.

/// One torch release: its wheel, the CUDA runtime its `libc10_cuda.so` links,
/// and how its C++ headers must be compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    /// The version on the package index, e.g. `2.15.0`.
    pub version: &'static str,
    /// The CUDA version of the default Linux wheel (`torch.version.cuda`):
    /// the headers the fake runtime is compiled with.
    pub cuda: &'static str,
    /// The wheel's C++ library ABI (`_GLIBCXX_USE_CXX11_ABI`): the
    /// pre-C++11 `std::string` up to 2.6, the C++11 one from 2.7.
    pub cxx11_abi: bool,
}

impl Release {
    /// `major * 100 + minor`, what `harness.cpp` switches on (`VK_TORCH`).
    pub fn code(&self) -> u32 {
        let mut parts = self.version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let major = parts.next().unwrap_or(0);
        let minor = parts.next().unwrap_or(0);
        major * 100 + minor
    }

    /// The CUDA major version: the runtime library is `libcudart.so.<major>`.
    pub fn cuda_major(&self) -> u32 {
        self.cuda.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0)
    }

    /// The C++ standard the release's headers need.
    pub fn cpp_std(&self) -> &'static str {
        if self.code() >= 211 {
            "c++20"
        } else {
            "c++17"
        }
    }

    /// The release named `version` (`2.15.0`, or `2.15` for the newest
    /// patch release of that line).
    pub fn find(version: &str) -> Option<&'static Release> {
        RELEASES
            .iter()
            .find(|r| r.version == version)
            .or_else(|| RELEASES.iter().find(|r| r.version.starts_with(&format!("{version}."))))
    }

    /// The newest release.
    pub fn newest() -> &'static Release {
        &RELEASES[0]
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "torch {}", self.version)
    }
}

/// Every release the harness is built for, newest first. Between them they
/// cover every row of the spec's version table (section 12): 2.4 is R24,
/// 2.6 and 2.8 the `CUDAAllocatorConfig` era, 2.10 to 2.12 R26, and 2.13 on
/// break size ties by segment age (`BlockComparatorSizeCounterAddress`).
/// Older wheels are not served: 2.0 links the CUDA 11 runtime, and 1.13
/// links it statically (nothing to fake).
pub const RELEASES: &[Release] = &[
    Release { version: "2.15.0", cuda: "13.2", cxx11_abi: true },
    Release { version: "2.13.0", cuda: "13.0", cxx11_abi: true },
    Release { version: "2.12.0", cuda: "13.0", cxx11_abi: true },
    Release { version: "2.11.0", cuda: "13.0", cxx11_abi: true },
    Release { version: "2.10.0", cuda: "12.8", cxx11_abi: true },
    Release { version: "2.8.0", cuda: "12.8", cxx11_abi: true },
    Release { version: "2.6.0", cuda: "12.4", cxx11_abi: false },
    Release { version: "2.4.1", cuda: "12.1", cxx11_abi: false },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_found_by_version_and_line() {
        assert_eq!(Release::find("2.15.0").unwrap().code(), 215);
        assert_eq!(Release::find("2.4").unwrap().version, "2.4.1");
        assert_eq!(Release::find("2.4").unwrap().cuda_major(), 12);
        assert!(Release::find("1.13").is_none());
        assert_eq!(Release::newest().version, "2.15.0");
    }
}
