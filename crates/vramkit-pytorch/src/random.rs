//! Random programs: the sweeps that hold vramkit to PyTorch run many of them.

use crate::program::{Op, Program};

/// What a random program exercises.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// Operations to draw (frees, mallocs and the rest; the program may end
    /// with a few more).
    pub ops: usize,
    /// Side streams: mallocs on streams 1 and 2, `record_stream` before some
    /// frees, and event completions (run it with [`Setup::manual_events`](crate::Setup)).
    pub streams: bool,
    /// `torch.cuda.empty_cache()` calls.
    pub empty_cache: bool,
    /// Private pools: phases that allocate to a pool from one stream, then end
    /// it and later release it.
    pub pools: bool,
    /// Run-time `_set_allocator_settings` calls, drawn from `settings`.
    pub settings: Vec<String>,
    /// A memory fraction set before the first malloc.
    pub fraction: Option<f64>,
    /// The largest request: sizes scale to it (3 GiB unless a tight
    /// capacity asks for less).
    pub largest: u64,
    /// `p` (print `memory_stats()`) every this many operations (0: never).
    pub stats_every: usize,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            ops: 1500,
            streams: false,
            empty_cache: true,
            pools: false,
            settings: Vec::new(),
            fraction: None,
            largest: 3 << 30,
            stats_every: 0,
        }
    }
}

/// A small deterministic generator (xorshift64*), so a seed names a program
/// on every machine.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).max(1))
    }
}

/// The program that `seed` names under `shape`. Mixed small (< 1 MiB),
/// large and huge requests, frees of random live ones, and what the shape
/// asks for; never an operation PyTorch would refuse as misuse.
pub fn random_program(seed: u64, shape: &Shape) -> Program {
    let mut rng = Rng::new(seed);
    let mut ops = Vec::new();
    let mut live: Vec<u64> = Vec::new();
    let mut next_id = 0u64;
    // The pool being allocated to (pool id, stream), and pools to release
    // later, with the allocations each still holds: a pool is released only
    // once they are all freed. (torch 2.15 with expandable segments frees a
    // released pool that still holds blocks at the next empty_cache(), and
    // then reads it again: a use after free in PyTorch.)
    let mut open_pool: Option<(u64, u32)> = None;
    let mut ended_pools: Vec<u64> = Vec::new();
    let mut in_pool: Vec<(u64, u64)> = Vec::new();
    let mut next_pool = 0u64;
    let largest = shape.largest.max(4 << 20);
    let size = |rng: &mut Rng| -> u64 {
        let r = rng.unit();
        if r < 0.45 {
            rng.range(1, 1 << 20)
        } else if r < 0.9 {
            rng.range(1 << 20, (64 << 20).min(largest / 4).max(2 << 20))
        } else if r < 0.98 {
            rng.range((64 << 20).min(largest / 4), (600 << 20).min(largest / 2).max(largest / 4 + 1))
        } else {
            rng.range((600 << 20).min(largest / 2), largest)
        }
    };
    if let Some(f) = shape.fraction {
        ops.push(Op::SetFraction(f));
    }
    for step in 0..shape.ops {
        let r = rng.unit();
        if r < 0.55 || live.is_empty() {
            next_id += 1;
            let stream = match open_pool {
                Some((_, s)) if rng.unit() < 0.5 => s,
                _ if shape.streams && rng.unit() < 0.3 => rng.below(3) as u32,
                _ => 0,
            };
            ops.push(Op::Malloc { id: next_id, size: size(&mut rng), stream });
            live.push(next_id);
            if let Some((pool, s)) = open_pool {
                if s == stream {
                    in_pool.push((next_id, pool));
                }
            }
        } else if r < 0.95 {
            let id = live.swap_remove(rng.below(live.len() as u64) as usize);
            in_pool.retain(|&(i, _)| i != id);
            if shape.streams && rng.unit() < 0.2 {
                ops.push(Op::RecordStream { id, stream: 1 + rng.below(2) as u32 });
            }
            ops.push(Op::Free { id });
        } else if r < 0.965 {
            // Never inside an "allocate to pool" (a graph capture): torch
            // 2.6 asserts there, and CUDA forbids cudaFree while capturing.
            if shape.empty_cache && open_pool.is_none() {
                ops.push(Op::EmptyCache);
            }
        } else if r < 0.975 {
            if shape.pools {
                match open_pool.take() {
                    Some((pool, _)) => {
                        ops.push(Op::EndPool { pool });
                        ended_pools.push(pool);
                    }
                    None => {
                        next_pool += 1;
                        let stream = if shape.streams { rng.below(3) as u32 } else { 0 };
                        ops.push(Op::BeginPool { pool: next_pool, stream });
                        open_pool = Some((next_pool, stream));
                    }
                }
            }
        } else if r < 0.98 {
            let empty: Vec<usize> = (0..ended_pools.len()).filter(|&k| in_pool.iter().all(|&(_, p)| p != ended_pools[k])).collect();
            if shape.pools && !empty.is_empty() {
                let pool = ended_pools.swap_remove(empty[rng.below(empty.len() as u64) as usize]);
                ops.push(Op::ReleasePool { pool });
            }
        } else if r < 0.985 {
            if !shape.settings.is_empty() {
                let conf = &shape.settings[rng.below(shape.settings.len() as u64) as usize];
                ops.push(Op::SetSettings(conf.clone()));
            }
        } else if shape.streams {
            ops.push(Op::CompleteEvents);
        }
        if shape.streams && rng.unit() < 0.05 {
            ops.push(Op::CompleteEvents);
        }
        if shape.stats_every > 0 && (step + 1) % shape.stats_every == 0 {
            ops.push(Op::Stats);
        }
    }
    if let Some((pool, _)) = open_pool {
        ops.push(Op::EndPool { pool });
    }
    if shape.stats_every > 0 {
        ops.push(Op::Stats);
    }
    Program { ops }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_names_one_program() {
        let shape = Shape { streams: true, pools: true, settings: vec!["max_split_size_mb:64".into()], ..Shape::default() };
        let a = random_program(7, &shape);
        assert_eq!(a, random_program(7, &shape));
        assert_ne!(a, random_program(8, &shape));
        let count = |f: fn(&Op) -> bool| a.ops.iter().filter(|o| f(o)).count();
        assert!(count(|o| matches!(o, Op::Malloc { .. })) > 700);
        assert!(count(|o| matches!(o, Op::RecordStream { .. })) > 10);
        assert!(count(|o| matches!(o, Op::BeginPool { .. })) > 0);
        assert_eq!(count(|o| matches!(o, Op::BeginPool { .. })), count(|o| matches!(o, Op::EndPool { .. })));
        assert!(count(|o| matches!(o, Op::SetSettings(_))) > 0);
    }

    #[test]
    fn sizes_respect_the_largest_request() {
        let shape = Shape { largest: 256 << 20, ..Shape::default() };
        let p = random_program(1, &shape);
        let max = p.ops.iter().filter_map(|o| if let Op::Malloc { size, .. } = o { Some(*size) } else { None }).max();
        assert!(max.unwrap() <= 256 << 20);
    }
}
