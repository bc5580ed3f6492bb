//! The symbols torch imports from each NVIDIA library, per CUDA major.
//!
//! `symbols/cuda<major>.txt` are written by `tools/gen_symbols.py` from the
//! torch wheels of that major and committed; the build turns each section
//! into a stub library with that soname and version node.

/// The CUDA majors the stack is built for, with the torch wheels behind
/// each list.
pub const CUDA_MAJORS: &[u32] = &[12, 13];

const CUDA12: &str = include_str!("../symbols/cuda12.txt");
const CUDA13: &str = include_str!("../symbols/cuda13.txt");

/// One NVIDIA library torch links or opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Library {
    /// `DT_SONAME`, e.g. `libcublas.so.13`.
    pub soname: String,
    /// The symbol version node its exports carry (`libcublas.so.13`,
    /// `NVSHMEM`), `None` for libraries that version nothing (NCCL, the
    /// driver).
    pub version_node: Option<String>,
    /// What torch imports from it, sorted.
    pub symbols: Vec<String>,
}

impl Library {
    /// The family, which names the hand-written source `c/lib/<family>.c`:
    /// the soname without `lib` and `.so.*` (`cublasLt`, `nvshmem_host`).
    pub fn family(&self) -> &str {
        let name = self.soname.strip_prefix("lib").unwrap_or(&self.soname);
        name.split(".so").next().unwrap_or(name)
    }

    /// Whether this is one of the names the runtime itself answers to
    /// (`libcudart.so.N`, the driver `libcuda.so.1`).
    pub fn is_runtime(&self) -> bool {
        matches!(self.family(), "cudart" | "cuda")
    }
}

/// The libraries of one CUDA major.
pub fn libraries(cuda_major: u32) -> Result<Vec<Library>, String> {
    let text = match cuda_major {
        12 => CUDA12,
        13 => CUDA13,
        other => {
            return Err(format!(
                "no simulated CUDA stack for CUDA {other}: torch wheels use CUDA 12 or 13 (give 12 or 13)"
            ))
        }
    };
    parse(text).map_err(|e| format!("symbols/cuda{cuda_major}.txt: {e} (regenerate it with tools/gen_symbols.py)"))
}

/// Parses a list: `[soname]` or `[soname version=NODE]` sections, one
/// symbol a line, `#` comments.
pub fn parse(text: &str) -> Result<Vec<Library>, String> {
    let mut libraries: Vec<Library> = Vec::new();
    for (number, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let mut words = header.split_whitespace();
            let soname = words.next().ok_or_else(|| format!("line {number}: empty section header"))?;
            let version_node = match words.next() {
                None => None,
                Some(w) => Some(
                    w.strip_prefix("version=")
                        .ok_or_else(|| format!("line {number}: expected `version=NODE`, found {w:?}"))?
                        .to_string(),
                ),
            };
            libraries.push(Library { soname: soname.to_string(), version_node, symbols: Vec::new() });
        } else {
            let library = libraries.last_mut().ok_or_else(|| format!("line {number}: symbol {line:?} before any [library]"))?;
            if !line.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("line {number}: {line:?} is not a C symbol"));
            }
            library.symbols.push(line.to_string());
        }
    }
    Ok(libraries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_majors_list_every_library_torch_links_with_its_version_node() {
        for (major, cublas, cufft) in [(12, "libcublas.so.12", "libcufft.so.11"), (13, "libcublas.so.13", "libcufft.so.12")] {
            let libs = libraries(major).unwrap_or_else(|e| panic!("{e}"));
            let find = |soname: &str| libs.iter().find(|l| l.soname == soname).unwrap_or_else(|| panic!("cuda{major}: no {soname}"));
            assert_eq!(find(cublas).version_node.as_deref(), Some(cublas));
            assert!(find(cublas).symbols.iter().any(|s| s == "cublasCreate_v2"));
            assert_eq!(find(cufft).version_node.as_deref(), Some(cufft));
            assert_eq!(find("libnvshmem_host.so.3").version_node.as_deref(), Some("NVSHMEM"));
            assert_eq!(find("libnccl.so.2").version_node, None);
            assert!(find("libcudnn.so.9").symbols.iter().any(|s| s == "cudnnBackendGetAttribute"));
            assert!(find(&format!("libcudart.so.{major}")).is_runtime());
            assert!(find("libcuda.so.1").is_runtime());
            assert_eq!(find(&format!("libcublasLt.so.{major}")).family(), "cublasLt");
            assert!(libs.iter().map(|l| l.symbols.len()).sum::<usize>() > 700);
        }
    }

    #[test]
    fn malformed_lists_name_the_line() {
        assert_eq!(parse("cublasCreate_v2\n").unwrap_err(), "line 1: symbol \"cublasCreate_v2\" before any [library]");
        assert!(parse("[libx.so.1 node=x]\n").unwrap_err().contains("line 1"));
        assert!(parse("[libx.so.1]\nnot a symbol\n").unwrap_err().contains("line 2"));
        assert!(libraries(11).unwrap_err().contains("give 12 or 13"));
    }
}
