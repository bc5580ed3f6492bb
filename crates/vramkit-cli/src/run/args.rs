//! `vramkit run`'s arguments, and the help that teaches it.

use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;

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
