//! A seeded mutation fuzzer that runs on stable Rust inside `cargo test`: no nightly toolchain
//! (cargo-fuzz, libFuzzer) is reachable here, and CI must run it from a fresh clone.
//!
//! Each target starts from its committed corpus (`tests/fuzz/corpus/<target>/`, real inputs
//! and known-hostile ones), runs every entry as is, then mutates entries with stacked byte- and
//! text-level mutations (flips, interesting numbers, repeats that build deep nesting and long
//! values, splices between entries). Inputs the target accepts join the pool, which stands in
//! for coverage feedback: mutating a valid input reaches deeper than mutating noise.
//!
//! Budget: `NRI_ALIGN_FUZZ_SECS=N` runs each target for N seconds with a fresh seed (what
//! `hack/test` does); otherwise a fixed number of iterations (`NRI_ALIGN_FUZZ_ITERS`, default
//! 300) from a fixed seed, so a plain `cargo test` is quick and repeatable.
//! `NRI_ALIGN_FUZZ_SEED` replays a run. A failing input is written to
//! `$CARGO_TARGET_TMPDIR/fuzz-failures/` and the panic names it with the seed.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use test_support::rng::Rng;

/// What a target made of one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Parsed and used: worth mutating further.
    Accepted,
    /// Refused with an error (which the target has checked).
    Rejected,
}

/// Longest error message a target accepts for any input: errors must never repeat a hostile
/// value whole (a megabyte annotation must not come back in a CRI error or a log line).
pub const MAX_ERROR_BYTES: usize = 2048;

/// Asserts that an error message is bounded and says something.
pub fn check_error(what: &str, message: &str) {
    assert!(!message.trim().is_empty(), "{what}: empty error message");
    assert!(
        message.len() <= MAX_ERROR_BYTES,
        "{what}: a {}-byte error message (input echoed?): {}…",
        message.len(),
        message.chars().take(300).collect::<String>()
    );
}

/// Numbers that break arithmetic and allocation: limits of every integer width, and more.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "255",
    "256",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "1e308",
    "NaN",
];

/// Bytes that delimit or end things in the formats under test.
const BYTES: &[u8] = b"\0\n\r\t ,-:=./\\\"'<>{}[]#&;0123456789xX\xff\x80\x7f";

/// Fields of big-endian length headers (mux, ttrpc).
const WORDS: &[u32] = &[
    0,
    1,
    2,
    3,
    9,
    10,
    4096,
    4097,
    4 << 20,
    (4 << 20) + 1,
    (4 << 20) + 10,
    (4 << 20) + 11,
    0x7fff_ffff,
    0x8000_0000,
    0xdead_beef,
    u32::MAX,
];

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, pool: &[Vec<u8>], max_len: usize) {
    for _ in 0..1 + rng.below(6) {
        let len = input.len();
        match rng.below(11) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = BYTES[rng.below(BYTES.len())];
            }
            2 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                input.splice(i..i, bytes);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                input.drain(i..i + n);
            }
            4 if len > 0 => {
                // Repeat a range: long values, deep nesting, many list entries.
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                let piece = input[i..i + n].to_vec();
                let times = [2, 8, 64, 512][rng.below(4)];
                let at = i + n;
                input.splice(at..at, piece.iter().copied().cycle().take(n * times));
            }
            5 => {
                // Replace a run of digits (or insert) with a number that breaks arithmetic.
                let number = NUMBERS[rng.below(NUMBERS.len())].as_bytes();
                let start = rng.below(len + 1);
                let digits = input[start..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                input.splice(start..start + digits, number.iter().copied());
            }
            6 if len >= 4 => {
                let i = rng.below(len - 3);
                let w = WORDS[rng.below(WORDS.len())].to_be_bytes();
                input[i..i + 4].copy_from_slice(&w);
            }
            7 if !pool.is_empty() => {
                // Splice: a piece of another entry at a random place.
                let other = &pool[rng.below(pool.len())];
                if !other.is_empty() {
                    let a = rng.below(other.len());
                    let b = a + rng.below(other.len() - a) + 1;
                    let at = rng.below(len + 1);
                    input.splice(at..at, other[a..b].iter().copied());
                }
            }
            8 if len > 0 => {
                input.truncate(rng.below(len));
            }
            9 if len > 1 => {
                // Swap two bytes: reorders delimiters.
                let (a, b) = (rng.below(len), rng.below(len));
                input.swap(a, b);
            }
            _ => {
                let i = rng.below(len + 1);
                input.insert(i, BYTES[rng.below(BYTES.len())]);
            }
        }
    }
    input.truncate(max_len);
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/corpus")
        .join(target);
    let mut entries: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| {
            let path = e.expect("corpus entry").path();
            let data = std::fs::read(&path).expect("corpus file");
            (path.display().to_string(), data)
        })
        .collect();
    entries.sort();
    assert!(!entries.is_empty(), "corpus {} is empty", dir.display());
    entries
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

/// Keeps a failing input where a developer finds it, and says how to replay it.
fn save_failure(target: &str, seed: u64, iteration: u64, input: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
    let _ = std::fs::create_dir_all(&dir);
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    let path = dir.join(format!("{target}-{hash:016x}"));
    let _ = std::fs::write(&path, input);
    eprintln!(
        "fuzz {target}: failing input ({} bytes) saved to {} (seed {seed}, iteration {iteration}); \
         copy it into tests/fuzz/corpus/{target}/ once fixed",
        input.len(),
        path.display()
    );
    path
}

/// Runs `check` on the corpus of `target`, then on mutations of it within the budget. `check`
/// panics on a property violation; any panic fails the test with the input saved.
pub fn fuzz(target: &str, max_len: usize, mut check: impl FnMut(&[u8]) -> Outcome) {
    let secs = env_u64("NRI_ALIGN_FUZZ_SECS");
    let iterations = env_u64("NRI_ALIGN_FUZZ_ITERS").unwrap_or(300);
    let seed = env_u64("NRI_ALIGN_FUZZ_SEED").unwrap_or_else(|| match secs {
        // Time-boxed runs explore: a new seed each run, printed for replay.
        Some(_) => SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        None => 0x5eed,
    });
    let deadline = secs.map(|s| Instant::now() + Duration::from_secs(s));
    let mut rng = Rng::new(seed);
    let start = Instant::now();

    let mut run = |input: &[u8], iteration: u64| -> Outcome {
        match catch_unwind(AssertUnwindSafe(|| check(input))) {
            Ok(outcome) => outcome,
            Err(cause) => {
                let path = save_failure(target, seed, iteration, input);
                std::panic::resume_unwind(Box::new(format!(
                    "fuzz {target} failed on {} (replay: NRI_ALIGN_FUZZ_SEED={seed}): {}",
                    path.display(),
                    cause
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| cause.downcast_ref::<&str>().copied())
                        .unwrap_or("panic")
                )));
            }
        }
    };

    let mut pool: Vec<Vec<u8>> = Vec::new();
    for (_, data) in corpus(target) {
        run(&data, 0);
        pool.push(data);
    }
    let seeds = pool.len();
    let (mut execs, mut accepted) = (0u64, 0u64);
    loop {
        let done = match deadline {
            Some(d) => Instant::now() >= d,
            None => execs >= iterations,
        };
        if done {
            break;
        }
        let mut input = pool[rng.below(pool.len())].clone();
        mutate(&mut rng, &mut input, &pool, max_len);
        execs += 1;
        if run(&input, execs) == Outcome::Accepted {
            accepted += 1;
            // A bounded pool: new valid inputs replace old mutants, never the seeds.
            if pool.len() < 512 {
                pool.push(input);
            } else if rng.one_in(4) {
                let i = seeds + rng.below(pool.len() - seeds);
                pool[i] = input;
            }
        }
    }
    println!(
        "fuzz {target}: {execs} inputs in {:.1?} ({accepted} accepted, {seeds} corpus entries, \
         seed {seed})",
        start.elapsed()
    );
}
