//! How fast the kernel copies a file in, by where the buffer's data starts
//! relative to a 64-byte boundary: what the snapshot reader's read-ahead
//! (`vramkit-trace`, `pickle/read_ahead.rs`) aligns its chunks for.
//!
//! `cargo run --release -p vramkit-bench --example read_alignment -- FILE`
//!
//! Reads FILE whole in 4 MiB reads into one buffer, once per offset, each
//! three times (the file should be in the page cache: the first offset's
//! first round reads it in). A buffer from the allocator starts 16 bytes
//! past a page boundary when it is large (glibc's `mmap`ed blocks).

use std::io::Read;
use std::time::Instant;

const CHUNK: usize = 4 << 20;
const OFFSETS: [usize; 8] = [0, 8, 16, 32, 48, 64, 2048, 4000];

fn main() {
    let path = std::env::args().nth(1).expect("usage: read_alignment FILE");
    let mut buf = vec![1u8; CHUNK + 8192];
    let base = buf.as_ptr() as usize;
    // The first index at a 4096-byte boundary: every offset is counted from it.
    let page = (4096 - base % 4096) % 4096;
    println!("buffer from the allocator at {:#x} (page offset {})", base, base % 4096);
    for offset in OFFSETS {
        let mut times = Vec::new();
        let mut total = 0;
        for _ in 0..3 {
            let mut file = std::fs::File::open(&path).expect("open FILE");
            let start = page + offset;
            let t = Instant::now();
            total = 0;
            loop {
                let n = file.read(&mut buf[start..start + CHUNK]).expect("read FILE");
                if n == 0 {
                    break;
                }
                total += n;
            }
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let times: Vec<String> = times.iter().map(|ms| format!("{ms:.1}")).collect();
        println!("data at page offset {offset:>4}: {total} bytes in {} ms", times.join(" / "));
    }
}
