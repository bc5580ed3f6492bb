//! The command line, as clap sees it.

use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// vramkit: PyTorch's CUDA caching allocator, simulated, for memory snapshots.
///
/// Record a snapshot in PyTorch with
/// `torch.cuda.memory._record_memory_history()` and
/// `torch.cuda.memory._dump_snapshot("snap.pickle")`, then ask vramkit about it.
#[derive(Parser, Debug)]
#[command(name = "vramkit", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print PyTorch's memory_summary() table for the snapshot's state.
    Summary(SummaryArgs),
    /// Replay the trace under any PYTORCH_CUDA_ALLOC_CONF and report peak memory.
    Replay(ReplayArgs),
    /// Check that vramkit's allocator makes every decision PyTorch made in the trace.
    Verify(VerifyArgs),
    /// Convert a snapshot between pickle and JSON (both open in pytorch.org/memory_viz).
    Convert(ConvertArgs),
    /// Find the PYTORCH_CUDA_ALLOC_CONF that reserves the least for the trace.
    Tune(TuneArgs),
    /// Explain in plain words where the memory of a snapshot goes, and what to do.
    Doctor(DoctorArgs),
    /// Write one self-contained HTML report: charts, segment map, sites, tune, doctor.
    Report(ReportArgs),
    /// Run your PyTorch program on a simulated GPU: will it fit, at which batch size, with which setting.
    #[command(after_long_help = EXAMPLES)]
    Run(RunArgs),
}

/// Which PyTorch release's allocator rules to follow.
#[derive(Args, Debug, Default)]
pub struct RulesArgs {
    /// Follow this PyTorch release's allocator rules (e.g. 2.4, 2.12, 2.15).
    /// Default: the release the snapshot shows by the keys PyTorch wrote
    /// (the newest it may be, when the keys leave a range).
    #[arg(long, value_name = "VERSION")]
    pub pytorch: Option<String>,
}

#[derive(Args, Debug)]
pub struct SummaryArgs {
    /// A snapshot: pickle (any protocol) or JSON.
    pub snapshot: PathBuf,
    /// Print memory_stats() as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Leave out the per-pool rows (memory_summary(abbreviated=True)).
    #[arg(long)]
    pub abbreviated: bool,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// A snapshot recorded with _record_memory_history(): pickle or JSON.
    pub snapshot: PathBuf,
    /// Settings to replay under, in PYTORCH_CUDA_ALLOC_CONF syntax, e.g.
    /// "max_split_size_mb:128,expandable_segments:True". Default: the
    /// settings the snapshot was recorded with.
    #[arg(long)]
    pub conf: Option<String>,
    /// Device memory the allocator may use, e.g. 24GiB, 512MiB or plain
    /// bytes; the replay reports the first allocation that would not fit.
    /// Default: the capacity the trace implies when it shows refusals or an
    /// out-of-memory error, else unlimited.
    #[arg(long)]
    pub capacity: Option<String>,
    /// Follow the trace's own placement (what PyTorch did) instead of
    /// letting vramkit's allocator decide.
    #[arg(long)]
    pub oracle: bool,
    /// Print one JSON object (or {"devices": [...]} for several devices).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub rules: RulesArgs,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// A snapshot recorded with _record_memory_history(): pickle or JSON.
    pub snapshot: PathBuf,
    /// Print one JSON object (or {"devices": [...]}).
    #[arg(long)]
    pub json: bool,
    /// Device memory PyTorch could use when it recorded the trace (its GPU's
    /// total, e.g. 80GiB): where refusals begin, and what a memory fraction
    /// and expandable reservations are sized by. Default: what the trace
    /// implies when it shows refusals or an out-of-memory error, else
    /// unlimited.
    #[arg(long)]
    pub capacity: Option<String>,
    /// The per-process memory fraction the program set with
    /// torch.cuda.set_per_process_memory_fraction() before allocating (the
    /// snapshot does not record it); needs --capacity.
    #[arg(long, requires = "capacity")]
    pub fraction: Option<f64>,
    #[command(flatten)]
    pub rules: RulesArgs,
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The snapshot to read (pickle or JSON, detected from its content).
    pub input: PathBuf,
    /// Where to write. The format follows the extension (.json, or .pickle /
    /// .pkl for pickle protocol 4) unless --to says otherwise.
    pub output: PathBuf,
    /// Output format: json or pickle.
    #[arg(long, value_parser = ["json", "pickle"])]
    pub to: Option<String>,
}

#[derive(Args, Debug)]
pub struct TuneArgs {
    /// Snapshots recorded with _record_memory_history(); several (one per
    /// rank) also name the setting that is best for the worst of them.
    #[arg(required = true)]
    pub snapshots: Vec<PathBuf>,
    /// Device memory the allocator may use, e.g. 80GiB; a setting that runs
    /// out of memory at it ranks last. Default: the capacity the trace
    /// implies when it shows refusals or an out-of-memory error, else
    /// unlimited. garbage_collection_threshold is only tried with a capacity.
    #[arg(long)]
    pub capacity: Option<String>,
    /// Try at most this many settings (the simplest first; the recorded
    /// settings always count).
    #[arg(long)]
    pub max_candidates: Option<usize>,
    /// Show every row of the ranked table, not the best 20.
    #[arg(long)]
    pub all: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub rules: RulesArgs,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// A snapshot: with allocation events, or state only.
    pub snapshot: PathBuf,
    /// Device memory the allocator may use, for the tune it runs (see `vramkit tune`).
    #[arg(long)]
    pub capacity: Option<String>,
    /// Try at most this many settings in the tune it runs.
    #[arg(long)]
    pub max_candidates: Option<usize>,
    /// Print the diagnosis as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub rules: RulesArgs,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A snapshot: with allocation events, or state only.
    pub snapshot: PathBuf,
    /// The HTML file to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// The device to report on. Default: the first with allocation events,
    /// else the first.
    #[arg(long)]
    pub device: Option<i64>,
    /// Device memory the allocator may use, for the tune it runs (see `vramkit tune`).
    #[arg(long)]
    pub capacity: Option<String>,
    /// Try at most this many settings in the tune it runs.
    #[arg(long)]
    pub max_candidates: Option<usize>,
    #[command(flatten)]
    pub rules: RulesArgs,
}

/// The GPU simulated when `--gpu` is not given.
pub const DEFAULT_GPU: &str = "a100-80gb";

/// The examples and notes after `vramkit run --help`.
pub const EXAMPLES: &str = "\
Examples:
  # Will two training steps fit on a 24 GB RTX 4090, and which PYTORCH_CUDA_ALLOC_CONF is best there?
  vramkit run --gpu rtx4090 -- python train.py --steps 2

  # The largest batch size that fits on an A100 80GB: BS doubles from 1 until a run runs out of
  # memory, then bisection finds the edge, for your settings and for the best ones.
  vramkit run --gpu a100-80gb --batch BS=1..512 -- python train.py --batch-size {BS}

  # Only some values make sense: try these (the script reads the environment variable MICRO_BS).
  vramkit run --gpu l4 --batch MICRO_BS=4,8,12,16,24,32 -- python train.py

  # Leave 1.5 GiB for the CUDA context and NCCL, try expandable segments, keep the snapshot.
  vramkit run --gpu h100 --reserve 1.5GiB --conf expandable_segments:True -o snap.pickle -- python train.py

How it works: your command runs with your Python and your torch, on a simulated GPU: the CUDA
libraries are replaced by a stand-in whose kernels do nothing, and PyTorch's own caching allocator
makes its real decisions on the card's real memory size. PyTorch records its memory history
(torch.cuda.memory._record_memory_history) and the snapshot is read as `vramkit doctor` reads one.
Run a few steps, not a whole training: each run takes seconds plus the program's Python time.

What it cannot know: kernels do not run, so tensors hold zeros (data-dependent shapes and .item()
in control flow see zeros), and memory outside PyTorch's allocator (the CUDA context, NCCL, other
processes) is not counted unless --reserve adds it.

Exit status: 0 it fits, 1 it ran out of memory (or even the smallest --batch value did) or the
program failed, 2 bad input or no simulated GPU on this machine.";

/// `vramkit run [OPTIONS] [--] COMMAND...`
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The GPU to simulate: t4, l4, rtx4090, a100-40gb, a100-80gb, h100, h200 (the memory and
    /// properties of the real card), or a plain size such as 24GiB. Default: a100-80gb.
    #[arg(long, value_name = "NAME|SIZE")]
    pub gpu: Option<String>,
    /// PYTORCH_CUDA_ALLOC_CONF for the program, e.g. "expandable_segments:True". Default: the one
    /// in your environment, else PyTorch's defaults.
    #[arg(long, value_name = "STR")]
    pub conf: Option<String>,
    /// Find the largest value of VAR that fits: VAR=LO..HI (doubling from LO, then bisection) or
    /// VAR=LIST of increasing values (e.g. BS=8,16,24,32). Each run gets VAR in its environment,
    /// and {VAR} in the command is replaced by the value.
    #[arg(long, value_name = "VAR=LIST|VAR=LO..HI")]
    pub batch: Option<String>,
    /// Memory taken outside PyTorch's allocator, off the card's total: the CUDA context (about
    /// 0.3 to 0.6 GiB), NCCL buffers, other processes. E.g. 1GiB. Default: none.
    #[arg(long, value_name = "SIZE")]
    pub reserve: Option<String>,
    /// Keep the snapshot the report is made from (with --batch: the largest value that fits with
    /// your settings); open it in https://pytorch.org/memory_viz or with `vramkit report`.
    #[arg(short, long, value_name = "SNAP.pickle")]
    pub output: Option<PathBuf>,
    /// The Python whose torch the program imports, when the command does not start with it (a
    /// shell script, `uv run`). Default: the command's interpreter, else python3 on PATH.
    #[arg(long, value_name = "PYTHON")]
    pub python: Option<PathBuf>,
    /// Try at most this many settings in the tune (see `vramkit tune`).
    #[arg(long)]
    pub max_candidates: Option<usize>,
    /// Print one JSON object on stdout (the program's own output goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// The program to run and its arguments, e.g. python train.py --lr 3e-4.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}
