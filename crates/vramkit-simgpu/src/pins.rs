//! The NVIDIA library versions a torch wheel pins, which the stubs report.
//!
//! A torch wheel names the cuDNN it was built and tested with
//! (`Requires-Dist: nvidia-cudnn-cu12==9.10.2.21`); PyTorch reads the
//! version at run time and takes version-dependent paths (which attention
//! backends it offers, for one). The cuDNN stub reports
//! `FAKECUDA_CUDNN_VERSION`, else the newest any wheel of the major pins.

/// The cuDNN version (`major * 10000 + minor * 100 + patch`, as
/// `cudnnGetVersion` reports it) that a torch wheel's `METADATA` pins.
pub fn pinned_cudnn_version(metadata: &str) -> Option<u32> {
    metadata.lines().filter_map(|l| l.strip_prefix("Requires-Dist:")).find_map(|requirement| {
        let requirement = requirement.trim();
        if !requirement.starts_with("nvidia-cudnn-cu") {
            return None;
        }
        let version = requirement.split("==").nth(1)?;
        let version: String = version.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
        let (major, minor, patch) = (parts.next()??, parts.next()??, parts.next().flatten().unwrap_or(0));
        Some(major * 10000 + minor * 100 + patch)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_of_the_pin_are_read() {
        let old = "Name: torch\nRequires-Dist: nvidia-cudnn-cu12 (==9.1.0.70) ; platform_system == \"Linux\"\n";
        let new = "Requires-Dist: filelock\nRequires-Dist: nvidia-cudnn-cu13==9.26.0.51; platform_system == \"Linux\"\n";
        assert_eq!(pinned_cudnn_version(old), Some(90100));
        assert_eq!(pinned_cudnn_version(new), Some(92600));
        assert_eq!(pinned_cudnn_version("Requires-Dist: nvidia-cudnn-cu12>=9\n"), None);
        assert_eq!(pinned_cudnn_version("- [NVIDIA cuDNN](https://developer.nvidia.com/cudnn) v8.5 or above\n"), None);
    }
}
