//! Which Python the command runs, and which torch it would import: the simulated CUDA stack must
//! be the one of that torch's CUDA major, and torch cannot be imported to ask (that needs a stack).

use crate::input::CliError;
use serde::Deserialize;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use vramkit_core::PytorchRelease;

/// The interpreter, and how vramkit knows it is the one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interpreter {
    pub program: OsString,
    /// Empty when the command starts with it; else a note for the output.
    pub assumed: String,
}

/// The interpreter of `command`: `--python`, else the command itself when it is a Python, else
/// the one its `#!` line names (torchrun, accelerate, an executable script), else `python3`. A
/// command that names no program this machine has is an error.
pub fn interpreter(command: &[OsString], given: Option<&Path>) -> Result<Interpreter, CliError> {
    let sure = |program: OsString| Ok(Interpreter { program, assumed: String::new() });
    let Some(first) = command.first() else { return Err(CliError::new("no command to run: give one after --, e.g. -- python train.py")) };
    let Some(path) = resolve(first) else {
        return Err(CliError::new(format!("{}: no such program (check the command after --, or PATH)", first.to_string_lossy())));
    };
    if let Some(p) = given {
        return sure(p.as_os_str().to_owned());
    }
    if is_python(first) {
        return sure(first.clone());
    }
    if let Some(python) = shebang_python(&path) {
        return sure(python);
    }
    Ok(Interpreter {
        program: "python3".into(),
        assumed: format!(
            "{} does not start with a Python, so vramkit checked the torch of python3 on PATH; pass --python if the program uses another",
            first.to_string_lossy()
        ),
    })
}

fn is_python(program: &OsStr) -> bool {
    Path::new(program).file_name().and_then(OsStr::to_str).is_some_and(|n| n.starts_with("python"))
}

/// `program` as the shell would find it.
fn resolve(program: &OsStr) -> Option<PathBuf> {
    let path = Path::new(program);
    if path.components().count() > 1 {
        return path.is_file().then(|| path.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(program)).find(|p| p.is_file())
}

/// The Python a `#!` line runs: `#!/venv/bin/python3` or `#!/usr/bin/env [-S] python3 [-u]`.
fn shebang_python(script: &Path) -> Option<OsString> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = std::str::from_utf8(&head[..n]).ok()?.strip_prefix("#!")?.lines().next()?;
    let mut words = line.split_whitespace();
    let mut program = words.next()?;
    if program.ends_with("/env") {
        program = words.find(|w| !w.starts_with('-'))?;
    }
    is_python(OsStr::new(program)).then(|| program.into())
}

/// What probe.py reads from torch's files.
#[derive(Clone, Debug, Deserialize)]
pub struct Torch {
    /// `sys.executable`.
    pub python: String,
    pub torch_dir: Option<PathBuf>,
    /// `torch.__version__`, e.g. `2.15.0+cu132`.
    #[serde(default)]
    pub version: Option<String>,
    /// `torch.version.cuda`, e.g. `13.2`; `None` in a CPU-only build.
    #[serde(default)]
    pub cuda: Option<String>,
    /// `torch.version.hip`: a ROCm build.
    #[serde(default)]
    pub hip: Option<String>,
    /// The distribution's METADATA file.
    #[serde(default)]
    pub metadata: Option<PathBuf>,
}

const PROBE: &str = include_str!("probe.py");

impl Torch {
    /// Asks `python` (without the simulated stack) where its torch is and what it was built for.
    pub fn probe(python: &OsStr) -> Result<Torch, CliError> {
        let shown = python.to_string_lossy();
        let out = Command::new(python).args(["-c", PROBE]).output().map_err(|e| {
            CliError::new(format!("cannot run the Python {shown:?} ({e}); is it installed? Name it with --python"))
        })?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().rev().find(|l| l.starts_with('{'));
        match line.map(serde_json::from_str::<Torch>) {
            Some(Ok(torch)) if out.status.success() => Ok(torch),
            _ => {
                let err = String::from_utf8_lossy(&out.stderr);
                let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
                Err(CliError::new(format!("{shown} failed while vramkit looked for its torch: {last}")))
            }
        }
    }

    /// The CUDA major of the stack this torch needs, or why no stack serves it.
    pub fn cuda_major(&self) -> Result<u32, CliError> {
        let Some(dir) = &self.torch_dir else {
            return Err(CliError::new(format!(
                "{} has no torch to import: install a CUDA build of torch there (pip install torch), or name the program's Python with --python",
                self.python
            )));
        };
        let version = self.version.as_deref().unwrap_or("(unknown version)");
        let at = format!("torch {version} ({})", dir.display());
        let served = format!("the simulated GPU serves torch built for CUDA 12 or 13 ({} to {} tested)", PytorchRelease::OLDEST, PytorchRelease::NEWEST);
        if let Some(hip) = &self.hip {
            return Err(CliError::new(format!("{at} is a ROCm build (HIP {hip}): {served}; install the default build (pip install torch)")));
        }
        let Some(cuda) = &self.cuda else {
            return Err(CliError::new(format!(
                "{at} is a CPU-only build: {served}; install a CUDA build, e.g. pip install torch --index-url https://download.pytorch.org/whl/cu128"
            )));
        };
        let major = cuda.split('.').next().and_then(|m| m.parse::<u32>().ok()).unwrap_or(0);
        if !vramkit_simgpu::CUDA_MAJORS.contains(&major) {
            return Err(CliError::new(format!("{at} is built for CUDA {cuda}: {served}; install torch 2.4 or newer (pip install 'torch>=2.4')")));
        }
        Ok(major)
    }

    /// The release whose allocator rules apply, and a note when vramkit has not tested it.
    pub fn release(&self) -> (Option<PytorchRelease>, Option<String>) {
        let Some(release) = self.version.as_deref().and_then(|v| PytorchRelease::parse(v).ok()) else {
            return (None, Some("torch's version could not be read; the newest allocator rules apply".into()));
        };
        let note = (release < PytorchRelease::OLDEST || release > PytorchRelease::NEWEST).then(|| {
            format!(
                "torch {release} is outside the releases vramkit is tested with ({} to {}); the closest one's allocator rules apply",
                PytorchRelease::OLDEST,
                PytorchRelease::NEWEST
            )
        });
        (Some(release), note)
    }

    /// `FAKECUDA_CUDNN_VERSION` for the cuDNN this torch pins, so the stub reports it.
    pub fn library_env(&self) -> Vec<(&'static str, String)> {
        let metadata = self.metadata.as_ref().and_then(|m| std::fs::read_to_string(m).ok());
        match metadata.as_deref().and_then(vramkit_simgpu::pinned_cudnn_version) {
            Some(version) => vec![("FAKECUDA_CUDNN_VERSION", version.to_string())],
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn torch(version: &str, cuda: Option<&str>, hip: Option<&str>) -> Torch {
        Torch {
            python: "/venv/bin/python".into(),
            torch_dir: Some("/venv/lib/python3.11/site-packages/torch".into()),
            version: Some(version.into()),
            cuda: cuda.map(Into::into),
            hip: hip.map(Into::into),
            metadata: None,
        }
    }

    #[test]
    fn the_interpreter_is_the_command_or_named_by_its_shebang() {
        let dir = std::env::temp_dir().join(format!("vramkit-shebang-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("venv/bin")).unwrap();
        let python = dir.join("venv/bin/python3.11");
        std::fs::write(&python, "").unwrap();
        let script = dir.join("torchrun");
        let program = |command: &[&OsStr], given: Option<&Path>| interpreter(&command.iter().map(|w| w.to_os_string()).collect::<Vec<_>>(), given);
        assert_eq!(program(&[python.as_os_str(), OsStr::new("t.py")], None).unwrap().program, python.as_os_str());
        assert_eq!(program(&[OsStr::new("sh"), OsStr::new("x.sh")], Some(&python)).unwrap().program, python.as_os_str());
        std::fs::write(&script, "#!/usr/bin/env -S python3.12 -u\nimport sys\n").unwrap();
        assert_eq!(program(&[script.as_os_str()], None).unwrap().program, "python3.12");
        std::fs::write(&script, "#!/bin/sh\nexec python3 \"$@\"\n").unwrap();
        let guessed = program(&[script.as_os_str()], None).unwrap();
        assert_eq!(guessed.program, "python3");
        assert!(guessed.assumed.contains("pass --python"), "{}", guessed.assumed);
        let missing = program(&[dir.join("trian.py").as_os_str()], None).unwrap_err().to_string();
        assert!(missing.ends_with("trian.py: no such program (check the command after --, or PATH)"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn builds_the_stack_cannot_serve_are_named_with_the_fix() {
        assert_eq!(torch("2.15.0+cu132", Some("13.2"), None).cuda_major().unwrap(), 13);
        assert_eq!(torch("2.4.1+cu121", Some("12.1"), None).cuda_major().unwrap(), 12);
        let cases = [
            (torch("2.15.0+cpu", None, None), "torch 2.15.0+cpu (/venv/lib/python3.11/site-packages/torch) is a CPU-only build"),
            (torch("2.0.1+cu117", Some("11.7"), None), "torch 2.0.1+cu117 (/venv/lib/python3.11/site-packages/torch) is built for CUDA 11.7"),
            (torch("2.5.1+rocm6.2", None, Some("6.2.41133")), "is a ROCm build (HIP 6.2.41133)"),
        ];
        for (t, says) in cases {
            let err = t.cuda_major().unwrap_err().to_string();
            assert!(err.contains(says) && err.contains("pip install"), "{err}");
        }
        let none = Torch { torch_dir: None, ..torch("", None, None) };
        assert!(none.cuda_major().unwrap_err().to_string().starts_with("/venv/bin/python has no torch to import"));
    }

    #[test]
    fn releases_outside_the_tested_range_get_a_note() {
        assert_eq!(torch("2.15.0+cu132", Some("13.2"), None).release(), (Some(PytorchRelease::new(2, 15)), None));
        let (release, note) = torch("2.3.1+cu121", Some("12.1"), None).release();
        assert_eq!(release, Some(PytorchRelease::new(2, 3)));
        assert!(note.unwrap().contains("torch 2.3 is outside the releases vramkit is tested with (2.4 to 2.15)"));
    }
}
