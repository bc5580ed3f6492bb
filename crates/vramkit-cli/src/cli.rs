//! The command line, as clap sees it.

use clap::{Args, Parser, Subcommand};
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
    #[command(after_long_help = crate::run::EXAMPLES)]
    Run(crate::run::RunArgs),
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
