//! Programs the harness runs: PyTorch allocator calls, one a line.

use std::fmt;

/// One call into PyTorch's allocator (see `c/harness.cpp` for the text form).
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `m ID SIZE STREAM`: allocate `size` bytes on stream `stream` (0 is the
    /// default stream, 1.. side streams), known afterwards as `id`.
    Malloc {
        /// The name later operations use.
        id: u64,
        /// Requested bytes.
        size: u64,
        /// Stream number.
        stream: u32,
    },
    /// `f ID`: free (a no-op when `id` was never allocated, or its malloc ran out of memory).
    Free {
        /// Which allocation.
        id: u64,
    },
    /// `r ID STREAM`: `record_stream` on another stream; the free then waits
    /// for that stream's event.
    RecordStream {
        /// Which allocation.
        id: u64,
        /// The stream using it.
        stream: u32,
    },
    /// `c`: every recorded event completes (the GPU caught up).
    CompleteEvents,
    /// `e`: `torch.cuda.empty_cache()`.
    EmptyCache,
    /// `x F`: `torch.cuda.set_per_process_memory_fraction(F)`.
    SetFraction(f64),
    /// `g CONF`: `torch.cuda.memory._set_allocator_settings(CONF)`.
    SetSettings(String),
    /// `b POOL STREAM`: begin allocating to private pool `(0, POOL)` from `stream`.
    BeginPool {
        /// The pool's second id.
        pool: u64,
        /// The stream whose allocations go to the pool.
        stream: u32,
    },
    /// `n POOL`: end allocating to the pool.
    EndPool {
        /// The pool's second id.
        pool: u64,
    },
    /// `d POOL`: release the pool (its use count drops).
    ReleasePool {
        /// The pool's second id.
        pool: u64,
    },
    /// `k`: `torch.cuda.reset_peak_memory_stats()`.
    ResetPeakStats,
    /// `s PATH`: write the snapshot (as JSON) to `PATH`.
    Snapshot(String),
    /// `p`: print `memory_stats()`.
    Stats,
    /// `t N SIZE`: time `n` cache-hit malloc+free pairs of `size` bytes.
    TimePairs {
        /// Pairs timed.
        n: u64,
        /// Bytes each.
        size: u64,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Malloc { id, size, stream } => write!(f, "m {id} {size} {stream}"),
            Op::Free { id } => write!(f, "f {id}"),
            Op::RecordStream { id, stream } => write!(f, "r {id} {stream}"),
            Op::CompleteEvents => write!(f, "c"),
            Op::EmptyCache => write!(f, "e"),
            Op::SetFraction(x) => write!(f, "x {x}"),
            Op::SetSettings(conf) => write!(f, "g {conf}"),
            Op::BeginPool { pool, stream } => write!(f, "b {pool} {stream}"),
            Op::EndPool { pool } => write!(f, "n {pool}"),
            Op::ReleasePool { pool } => write!(f, "d {pool}"),
            Op::ResetPeakStats => write!(f, "k"),
            Op::Snapshot(path) => write!(f, "s {path}"),
            Op::Stats => write!(f, "p"),
            Op::TimePairs { n, size } => write!(f, "t {n} {size}"),
        }
    }
}

impl Op {
    /// Parses one line of the text form; `Ok(None)` for a blank or `#` line.
    pub fn parse(line: &str) -> Result<Option<Op>, String> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return Ok(None);
        }
        let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        let args: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| -> Result<u64, String> {
            args.get(i)
                .ok_or_else(|| format!("`{line}`: argument {} is missing", i + 1))?
                .parse()
                .map_err(|_| format!("`{line}`: argument {} is not a whole number", i + 1))
        };
        let stream = |i: usize| -> Result<u32, String> {
            u32::try_from(num(i)?).map_err(|_| format!("`{line}`: the stream number is too large"))
        };
        let want = |n: usize| -> Result<(), String> {
            if args.len() == n {
                Ok(())
            } else {
                Err(format!("`{line}`: `{word}` takes {n} argument(s), got {}", args.len()))
            }
        };
        let op = match word {
            "m" => {
                want(3)?;
                Op::Malloc { id: num(0)?, size: num(1)?, stream: stream(2)? }
            }
            "f" => {
                want(1)?;
                Op::Free { id: num(0)? }
            }
            "r" => {
                want(2)?;
                Op::RecordStream { id: num(0)?, stream: stream(1)? }
            }
            "c" => Op::CompleteEvents,
            "e" => Op::EmptyCache,
            "x" => {
                want(1)?;
                let x: f64 = args[0].parse().map_err(|_| format!("`{line}`: the fraction is not a number"))?;
                Op::SetFraction(x)
            }
            "g" => Op::SetSettings(rest.to_string()),
            "b" => {
                want(2)?;
                Op::BeginPool { pool: num(0)?, stream: stream(1)? }
            }
            "n" => {
                want(1)?;
                Op::EndPool { pool: num(0)? }
            }
            "d" => {
                want(1)?;
                Op::ReleasePool { pool: num(0)? }
            }
            "k" => Op::ResetPeakStats,
            "s" => Op::Snapshot(rest.to_string()),
            "p" => Op::Stats,
            "t" => {
                want(2)?;
                Op::TimePairs { n: num(0)?, size: num(1)? }
            }
            _ => return Err(format!("`{line}`: unknown operation `{word}`")),
        };
        Ok(Some(op))
    }
}

/// A program: operations in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    /// The operations.
    pub ops: Vec<Op>,
}

impl Program {
    /// Parses the text form, one operation a line.
    pub fn parse(text: &str) -> Result<Program, String> {
        let mut ops = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if let Some(op) = Op::parse(line).map_err(|e| format!("line {}: {e}", i + 1))? {
                ops.push(op);
            }
        }
        Ok(Program { ops })
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for op in &self.ops {
            writeln!(f, "{op}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_round_trips() {
        let text = "m 1 1000 0\nr 1 2\nf 1\nc\ne\nx 0.5\ng max_split_size_mb:64,expandable_segments:True\nb 3 1\nn 3\nd 3\nk\ns /tmp/a b.json\np\nt 100 512\n";
        let program = Program::parse(text).unwrap();
        assert_eq!(program.ops.len(), 14);
        assert_eq!(program.ops[6], Op::SetSettings("max_split_size_mb:64,expandable_segments:True".into()));
        assert_eq!(program.to_string(), text);
    }

    #[test]
    fn bad_lines_are_named() {
        assert_eq!(Program::parse("# c\n\nm 1 2 0\n").unwrap().ops.len(), 1);
        let e = Program::parse("m 1 2 0\nm 1 x 0\n").unwrap_err();
        assert!(e.starts_with("line 2: `m 1 x 0`: argument 2"), "{e}");
        assert!(Program::parse("q\n").unwrap_err().contains("unknown operation `q`"));
        assert!(Program::parse("f\n").unwrap_err().contains("takes 1 argument"));
    }
}
