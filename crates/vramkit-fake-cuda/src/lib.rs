//! A fake CUDA driver for tests on machines without a GPU.
//!
//! `libcuda.c` (beside this crate's `Cargo.toml`) implements the part of
//! the CUDA driver API that `vramkit-cuda` calls, on bookkeeping alone: no
//! memory stands behind its addresses and no kernel ever runs. It is strict
//! where the real driver is documented to be (no current context, an
//! unmap that is not exactly one mapping, freeing a reservation with pages
//! still mapped, unknown handles, sizes off the granularity all fail and
//! are counted), and at exit it reports what was left alive, so a test
//! proves the CUDA code balanced every call.
//!
//! [`FakeDriver::build`] compiles it with the system C compiler into a
//! directory as `libcuda.so`; [`FakeDriver::command`] runs a program with
//! that directory first on `LD_LIBRARY_PATH`, where cudarc's `dlopen`
//! finds it. The driver is loaded once per process, so a test runs the
//! code under test in a child process (usually its own test binary again,
//! with a filter).
//!
//! ```text
//!  test (parent)                       child process
//!  FakeDriver::build(dir)  --cc-->  dir/libcuda.so
//!  driver.command(exe)     ------>  cudarc dlopen("libcuda.so") -> fake
//!  driver.report()         <------  FAKE_CUDA_REPORT written at exit
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The C source of the fake driver.
pub const SOURCE: &str = include_str!("../libcuda.c");

/// Set to `1` to turn "no C compiler" from a skip into a failure (CI sets it).
pub const REQUIRE_ENV: &str = "VRAMKIT_REQUIRE_FAKE_CUDA";

/// A compiled fake driver in a directory of its own.
#[derive(Debug, Clone)]
pub struct FakeDriver {
    dir: PathBuf,
}

/// What the fake driver found still alive when its process exited, and
/// what it counted on the way: `key value` lines, see `libcuda.c`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    values: BTreeMap<String, u64>,
}

impl FakeDriver {
    /// Compiles the fake driver into `dir/libcuda.so` (creating `dir`).
    ///
    /// `Ok(None)` when this machine has no C compiler (`$CC` or `cc`) or is
    /// not Linux, after printing why, unless [`REQUIRE_ENV`] is `1`: then
    /// that is an error. `Err` when the compiler rejects the source.
    pub fn build(dir: &Path) -> Result<Option<FakeDriver>, String> {
        let required = std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1");
        let skip = |why: String| {
            if required {
                Err(format!(
                    "{why}, and {REQUIRE_ENV}=1 requires the fake CUDA driver"
                ))
            } else {
                eprintln!("skipped: {why}");
                Ok(None)
            }
        };
        if !cfg!(target_os = "linux") {
            return skip("the fake CUDA driver is built for Linux only".into());
        }
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        if !Command::new(&cc)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return skip(format!("no C compiler ({cc}); set CC or install cc"));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let source = dir.join("libcuda.c");
        std::fs::write(&source, SOURCE)
            .map_err(|e| format!("cannot write {}: {e}", source.display()))?;
        let library = dir.join("libcuda.so");
        let output = Command::new(&cc)
            .args([
                "-std=gnu11",
                "-O1",
                "-g",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-fPIC",
                "-shared",
                "-o",
            ])
            .arg(&library)
            .arg(&source)
            .arg("-lpthread")
            .output()
            .map_err(|e| format!("cannot run {cc}: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "{cc} failed on {}:\n{}",
                source.display(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(Some(FakeDriver {
            dir: dir.to_path_buf(),
        }))
    }

    /// The directory holding `libcuda.so`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the child's exit report goes.
    pub fn report_path(&self) -> PathBuf {
        self.dir.join("report.txt")
    }

    /// `program` with the fake driver first on `LD_LIBRARY_PATH` and its
    /// report going to [`report_path`](FakeDriver::report_path) (removed
    /// first, so a stale one is never read). Set `FAKE_CUDA_*` knobs on the
    /// returned command as needed.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let _ = std::fs::remove_file(self.report_path());
        let mut path = std::ffi::OsString::from(self.dir.as_os_str());
        if let Some(rest) = std::env::var_os("LD_LIBRARY_PATH") {
            path.push(":");
            path.push(rest);
        }
        let mut command = Command::new(program);
        command
            .env("LD_LIBRARY_PATH", path)
            .env("FAKE_CUDA_REPORT", self.report_path());
        command
    }

    /// The report the last child wrote.
    pub fn report(&self) -> Result<Report, String> {
        let path = self.report_path();
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "no fake-driver report at {} ({e}): did the child load the fake driver?",
                path.display()
            )
        })?;
        Report::parse(&text)
    }
}

impl Report {
    /// Parses `key value` lines.
    pub fn parse(text: &str) -> Result<Report, String> {
        let mut values = BTreeMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (key, value) = line
                .split_once(' ')
                .ok_or_else(|| format!("report line {line:?} is not `key value`"))?;
            let value = value
                .trim()
                .parse()
                .map_err(|e| format!("report line {line:?}: {e}"))?;
            values.insert(key.to_string(), value);
        }
        Ok(Report { values })
    }

    /// One counter; 0 when absent.
    pub fn get(&self, key: &str) -> u64 {
        self.values.get(key).copied().unwrap_or(0)
    }

    /// The names of every resource still alive at exit, with counts: empty
    /// when everything taken was given back.
    pub fn leaks(&self) -> Vec<(String, u64)> {
        [
            "live_allocations",
            "live_reservations",
            "live_mappings",
            "live_handles",
            "live_events",
            "context_retains",
            "used_bytes",
        ]
        .iter()
        .map(|k| (k.to_string(), self.get(k)))
        .filter(|&(_, n)| n > 0)
        .collect()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (key, value) in &self.values {
            writeln!(f, "{key} {value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse_and_name_leaks() {
        let report =
            Report::parse("calls 10\nlive_allocations 2\nlive_events 0\nused_bytes 4194304\n")
                .unwrap();
        assert_eq!(report.get("calls"), 10);
        assert_eq!(report.get("absent"), 0);
        assert_eq!(
            report.leaks(),
            vec![
                ("live_allocations".to_string(), 2),
                ("used_bytes".to_string(), 4194304)
            ]
        );
        assert!(Report::parse("calls ten\n").is_err());
        assert!(Report::parse("calls\n").is_err());
    }
}
