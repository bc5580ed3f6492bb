//! `vramkit run` end to end: real torch wheels running the programs in `tests/programs` on the
//! simulated GPU.
//!
//! `inputs` needs neither (bad input is refused before anything runs, a torch the stack cannot
//! serve is a fake package); `output` runs small programs and reads what `run` prints; `models`
//! finds the largest batch of a GPT-2-small-sized, a ResNet-50 and a diffusion-UNet training step
//! on a T4 and an A100 80GB, and checks the edge with runs of its own. Tests that need torch skip
//! when the machine cannot build the stack or make the environment, unless
//! `VRAMKIT_REQUIRE_SIMGPU=1`.

mod inputs;
mod models;
mod output;
mod support;
