//! Where the program ran out: the line of its own code that asked for the memory.
//!
//! The snapshot's `oom` entry carries the stack of the allocation. An allocation made by the
//! autograd engine's threads (during `loss.backward()`) has no Python frame there; the hook
//! then recorded the main thread's stack, which is blocked on the line that started backward.

use serde::Serialize;
use std::fmt;
use vramkit_core::Frame;
use vramkit_replay::doctor::site_of;

/// A line of the program's code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Location {
    pub file: String,
    pub line: i64,
    pub function: String,
    /// The text of the line, when the file can be read.
    pub code: Option<String>,
    /// What was allocating when the line is the one that started it (`MmBackward0 (autograd)`).
    pub inside: Option<String>,
}

/// The innermost frame of the program's own code: a Python file outside installed packages.
fn program_frame(frames: &[Frame]) -> Option<&Frame> {
    frames.iter().find(|f| {
        let path = f.filename.replace('\\', "/");
        path.ends_with(".py") && f.line > 0 && !["/site-packages/", "/dist-packages/", "/lib/python"].iter().any(|p| path.contains(p))
    })
}

/// The location of an allocation with `frames`, else of the main thread's `main_stack`.
pub fn locate(frames: &[Frame], main_stack: &[Frame]) -> Option<Location> {
    let (frame, inside) = match program_frame(frames) {
        Some(f) => (f, None),
        None => (program_frame(main_stack)?, site_of(frames)),
    };
    let code = std::fs::read_to_string(&frame.filename)
        .ok()
        .and_then(|text| text.lines().nth(usize::try_from(frame.line - 1).ok()?).map(|l| l.trim().to_string()));
    Some(Location { file: frame.filename.clone(), line: frame.line, function: frame.name.clone(), code, inside })
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} in {}", self.file, self.line, self.function)?;
        if let Some(code) = &self.code {
            write!(f, ": {code}")?;
        }
        if let Some(inside) = &self.inside {
            write!(f, " (allocating in {inside})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(filename: &str, line: i64, name: &str) -> Frame {
        Frame { filename: filename.into(), line, name: name.into() }
    }

    #[test]
    fn the_programs_own_frame_is_found_else_the_main_threads() {
        let forward = [
            frame("venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward"),
            frame("project/model.py", 42, "forward"),
            frame("project/train.py", 7, "<module>"),
        ];
        let at = locate(&forward, &[]).unwrap();
        assert_eq!((at.file.as_str(), at.line, at.function.as_str(), &at.inside), ("project/model.py", 42, "forward", &None));
        assert_eq!(at.to_string(), "project/model.py:42 in forward");
        let autograd = [
            frame("??", 0, "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc"),
            frame("??", 0, "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)"),
        ];
        let main = [frame("venv/lib/python3.11/site-packages/torch/autograd/__init__.py", 353, "backward"), frame("project/train.py", 30, "step")];
        let at = locate(&autograd, &main).unwrap();
        assert_eq!((at.line, at.inside.as_deref()), (30, Some("MmBackward0 (autograd)")));
        assert!(locate(&autograd, &[]).is_none());
    }

    #[test]
    fn the_line_is_quoted_from_the_file() {
        let file = std::env::temp_dir().join(format!("vramkit-location-{}.py", std::process::id()));
        std::fs::write(&file, "import torch\n    x = torch.empty(1 << 40, device='cuda')\n").unwrap();
        let at = locate(&[frame(file.to_str().unwrap(), 2, "<module>")], &[]).unwrap();
        assert_eq!(at.code.as_deref(), Some("x = torch.empty(1 << 40, device='cuda')"));
        assert!(at.to_string().ends_with(":2 in <module>: x = torch.empty(1 << 40, device='cuda')"));
        std::fs::remove_file(file).unwrap();
    }
}
