//! The C sources of the stack, and the generated stubs.
//!
//! Every source is compiled in from the repository (`include_str!`), so a
//! build needs nothing but a C compiler and the CUDA runtime headers; the
//! build writes them all under `<stack>/src/` and compiles from there,
//! which keeps a built stack inspectable and rebuildable by hand.

use crate::symbols::Library;

/// A source file: its path under `<stack>/src/` and its text.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    /// Relative path, `/`-separated.
    pub path: &'static str,
    /// The file's contents.
    pub text: &'static str,
}

/// Every hand-written source, vramkit-pytorch's fake runtime included.
pub const SOURCES: &[Source] = &[
    Source { path: "cudart.c", text: include_str!("../../vramkit-pytorch/c/cudart.c") },
    Source { path: "nvml.c", text: include_str!("../../vramkit-pytorch/c/nvml.c") },
    Source { path: "runtime.c", text: include_str!("../c/runtime.c") },
    Source { path: "driver.c", text: include_str!("../c/driver.c") },
    Source { path: "device.c", text: include_str!("../c/device.c") },
    Source { path: "simgpu.h", text: include_str!("../c/simgpu.h") },
    Source { path: "stub.h", text: include_str!("../c/stub.h") },
    Source { path: "lib/cublas.c", text: include_str!("../c/lib/cublas.c") },
    Source { path: "lib/cublasLt.c", text: include_str!("../c/lib/cublasLt.c") },
    Source { path: "lib/cudnn.c", text: include_str!("../c/lib/cudnn.c") },
    Source { path: "lib/cudnn_backend.c", text: include_str!("../c/lib/cudnn_backend.c") },
    Source { path: "lib/cudnn_rnn.c", text: include_str!("../c/lib/cudnn_rnn.c") },
    Source { path: "lib/cufft.c", text: include_str!("../c/lib/cufft.c") },
    Source { path: "lib/cupti.c", text: include_str!("../c/lib/cupti.c") },
    Source { path: "lib/cusolver.c", text: include_str!("../c/lib/cusolver.c") },
    Source { path: "lib/cusparse.c", text: include_str!("../c/lib/cusparse.c") },
    Source { path: "lib/nccl.c", text: include_str!("../c/lib/nccl.c") },
    Source { path: "lib/nvrtc.c", text: include_str!("../c/lib/nvrtc.c") },
    Source { path: "lib/size_query.h", text: include_str!("../c/lib/size_query.h") },
];

/// The runtime's translation units (it includes cudart.c, nvml.c and
/// driver.c itself).
pub const RUNTIME_UNITS: &[&str] = &["runtime.c", "device.c"];

/// The hand-written source of a library family, if it has one.
pub fn handwritten(family: &str) -> Option<&'static str> {
    let path = format!("lib/{family}.c");
    SOURCES.iter().find(|s| s.path == path).map(|s| s.path)
}

/// Functions returning a message (`const char *`) rather than a status.
fn returns_string(symbol: &str) -> bool {
    ["ErrorString", "StatusString", "StatusName", "ErrorName"].iter().any(|end| symbol.ends_with(end))
}

/// The generated stubs of `libraries` (one file for a library, or for the
/// runtime and the driver together): a weak definition per symbol, which a
/// hand-written one overrides at link time. A status function returns 0
/// (success in every NVIDIA library), a message function a fixed text; with
/// `VRAMKIT_SIMGPU_TRACE=1`, each says so the first time it is called.
pub fn generated_stubs(libraries: &[&Library]) -> String {
    let names: Vec<&str> = libraries.iter().map(|l| l.soname.as_str()).collect();
    let mut text = format!(
        "/* Generated from the symbol lists for {}: do not edit. */\n\
         #include \"../stub.h\"\n\
         __attribute__((unused)) static void called(const char *name, int *seen) {{\n\
         \x20 if (!__atomic_exchange_n(seen, 1, __ATOMIC_RELAXED)) simgpu_trace(\"generated stub %s called (returns 0)\", name);\n\
         }}\n\
         #define STUB(name) __attribute__((weak, visibility(\"default\"))) int name(void) \
         {{ static int seen; called(#name, &seen); return 0; }}\n\
         #define MESSAGE(name) __attribute__((weak, visibility(\"default\"))) const char *name(void) \
         {{ static int seen; called(#name, &seen); return \"simulated \" #name; }}\n",
        names.join(", ")
    );
    for library in libraries {
        for symbol in &library.symbols {
            let kind = if returns_string(symbol) { "MESSAGE" } else { "STUB" };
            text.push_str(&format!("{kind}({symbol})\n"));
        }
    }
    text
}

/// The linker version script giving every export the node `node`.
pub fn version_script(node: &str) -> String {
    format!("{node} {{ global: *; }};\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_include_of_a_source_is_shipped() {
        for source in SOURCES {
            for line in source.text.lines() {
                let Some(rest) = line.trim().strip_prefix("#include \"") else { continue };
                let included = rest.split('"').next().unwrap_or("");
                let dir = source.path.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
                let resolved = normalise(&format!("{dir}/{included}"));
                assert!(SOURCES.iter().any(|s| s.path == resolved), "{} includes {included}, not shipped", source.path);
            }
        }
    }

    fn normalise(path: &str) -> String {
        let mut parts: Vec<&str> = Vec::new();
        for part in path.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                p => parts.push(p),
            }
        }
        parts.join("/")
    }

    #[test]
    fn generated_stubs_are_weak_and_messages_return_text() {
        let lib = Library {
            soname: "libcublas.so.13".into(),
            version_node: Some("libcublas.so.13".into()),
            symbols: vec!["cublasSgemm_v2".into(), "cublasGetStatusString".into()],
        };
        let text = generated_stubs(&[&lib]);
        assert!(text.contains("STUB(cublasSgemm_v2)\n"));
        assert!(text.contains("MESSAGE(cublasGetStatusString)\n"));
        assert!(text.contains("weak"));
        assert_eq!(handwritten("cublas"), Some("lib/cublas.c"));
        assert_eq!(handwritten("cufile"), None);
        assert_eq!(version_script("NVSHMEM"), "NVSHMEM { global: *; };\n");
    }
}
