//! Wheels from the package index, and files taken out of them.
//!
//! Wheels live in `<cache>/wheels` (the directory vramkit-pytorch fills
//! too, so a wheel is downloaded once for both); a wheel already there is
//! used without asking the index. Extracted files go to `<cache>/<name>/`,
//! marked complete by a `.complete` file, in the layout vramkit-pytorch
//! uses for the CUDA headers, so either crate reuses what the other made.

use crate::unavailable::Unavailable;
use std::path::{Path, PathBuf};
use std::process::Command;


/// Finds the wheel for `spec` (`name==version`, version may end in `.*`)
/// in `<cache>/wheels`, else `pip download --no-deps`s it there; then
/// extracts the members under `prefixes` (none: extract nothing) into
/// `<cache>/<dest>` unless that is complete. Prints the wheel's path.
const FETCH: &str = r#"
import glob, os, shutil, subprocess, sys, tempfile, zipfile
cache, dest, spec = sys.argv[1:4]
prefixes = sys.argv[4:]
wheels = os.path.join(cache, 'wheels')
os.makedirs(wheels, exist_ok=True)
name, _, version = spec.partition('==')
stem, version = name.replace('-', '_'), version.rstrip('*').rstrip('.')
def find():
    for w in sorted(glob.glob(os.path.join(wheels, stem + '-' + version + '*.whl')), reverse=True):
        rest = os.path.basename(w)[len(stem) + 1:]
        if rest.startswith(version + '-') or rest.startswith(version + '.'):
            return w
wheel = find()
if wheel is None:
    r = subprocess.run([sys.executable, '-m', 'pip', 'download', '--quiet', '--no-deps', '--disable-pip-version-check',
                        '-d', wheels, spec], capture_output=True, text=True)
    wheel = find()
    if wheel is None:
        why = (r.stderr.strip().splitlines() or ['pip downloaded no matching wheel'])[-1]
        sys.exit('`pip download --no-deps ' + spec + '` failed: ' + why)
target = os.path.join(cache, dest)
if prefixes and not os.path.exists(os.path.join(target, '.complete')):
    z = zipfile.ZipFile(wheel)
    members = [n for n in z.namelist() if any(n.startswith(p) for p in prefixes)]
    if not members:
        print('nothing under ' + ' '.join(prefixes) + ' in ' + wheel, file=sys.stderr)
        sys.exit(3)
    tmp = tempfile.mkdtemp(prefix='.' + dest + '.', dir=cache)
    z.extractall(tmp, members)
    open(os.path.join(tmp, '.complete'), 'w').close()
    try:
        os.rename(tmp, target)
    except OSError:
        shutil.rmtree(tmp)  # another process finished first
print(wheel)
"#;

/// The Python the stack's tooling runs: `$PYTHON`, else `python3`.
pub(crate) fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The wheel for `spec` in `<cache>/wheels` (downloaded when missing), and
/// its members under `prefixes` extracted into `<cache>/<dest>`.
pub(crate) fn wheel(cache: &Path, spec: &str, dest: &str, prefixes: &[&str]) -> Result<PathBuf, Unavailable> {
    std::fs::create_dir_all(cache).map_err(|e| format!("cannot create {}: {e}", cache.display()))?;
    let out = Command::new(python())
        .args(["-c", FETCH])
        .arg(cache)
        .args([dest, spec])
        .args(prefixes)
        .output()
        .map_err(|e| Unavailable::Here(format!("cannot run {} ({e}); set PYTHON", python())))?;
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    match out.status.code() {
        Some(0) => Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())),
        Some(1) if stderr.contains("pip download") => Err(Unavailable::Here(stderr)),
        _ => Err(Unavailable::Failed(format!("fetching {spec}: {stderr}"))),
    }
}

/// The CUDA runtime headers of one major, as the compiler is given them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Headers {
    /// Holds `cuda.h` and `cuda_runtime_api.h` (`-I`).
    pub include: PathBuf,
    /// Holds `crt/host_defines.h`, which the runtime wheels of both majors
    /// lack (`-idirafter`).
    pub crt: PathBuf,
}

impl Headers {
    /// The headers of `cuda_major` under `cache`, fetched from the package
    /// index (`nvidia-cuda-runtime[-cu12]`, `nvidia-cuda-crt`) when missing:
    /// 12.8 for CUDA 12 (torch 2.8 and 2.10 build with it; the 12.x
    /// structures PyTorch reads did not change), 13.2 for CUDA 13.
    pub(crate) fn fetch(cache: &Path, cuda_major: u32) -> Result<Headers, Unavailable> {
        let (spec, dest, under) = match cuda_major {
            12 => ("nvidia-cuda-runtime-cu12==12.8.*", "cuda-12.8", "nvidia/cuda_runtime/include/"),
            13 => ("nvidia-cuda-runtime==13.2.*", "cuda-13.2", "nvidia/cu13/include/"),
            other => return Err(Unavailable::Failed(format!("no CUDA headers known for CUDA {other} (give 12 or 13)"))),
        };
        // Extracted before: the build needs the headers, not the wheels, so
        // no Python starts (through a version manager's shim it takes a
        // quarter of a second, and `vramkit run` asks on every call).
        let extracted = |dest: &str| cache.join(dest).join(".complete").is_file();
        if !extracted(dest) {
            wheel(cache, spec, dest, &[under])?;
        }
        if !extracted("cuda-crt-13") {
            wheel(cache, "nvidia-cuda-crt==13.2.*", "cuda-crt-13", &["nvidia/cu13/include/crt/"])?;
        }
        Ok(Headers { include: cache.join(dest).join(under), crt: cache.join("cuda-crt-13/nvidia/cu13/include") })
    }
}
