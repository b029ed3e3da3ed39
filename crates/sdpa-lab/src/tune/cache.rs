//! The per-config result cache: one JSON line per evaluated candidate, keyed by the variant,
//! the problem class, the timed shape and the machine (device name, driver, NVRTC version).
//! Lines are appended and flushed as results arrive, so a run stopped by Ctrl-C loses at most
//! the candidate in flight; `--resume` reads them back. New knobs or values add keys and
//! invalidate nothing; a line that does not parse is skipped and counted.

use super::evo::Eval;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a cached result is valid for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Key {
    /// Variant key.
    pub variant: String,
    /// Precision name.
    pub precision: String,
    /// Head dim.
    pub head_dim: u32,
    /// Shape class name.
    pub shape_class: String,
    /// The timed shape, `BxSqxSkvxHq/Hkv`.
    pub shape: String,
    /// GPU name.
    pub device: String,
    /// CUDA driver version.
    pub driver: i32,
    /// NVRTC version, `major.minor`.
    pub nvrtc: String,
    /// The kernel's compile key (sources, headers, defines, options, NVRTC version): an edited
    /// kernel is measured again.
    #[serde(default)]
    pub kernel: String,
    /// The gates' settings (prune factor, timed runs): a pruned result depends on them.
    #[serde(default)]
    pub settings: String,
}

#[derive(Serialize, Deserialize)]
struct Line {
    key: Key,
    eval: Eval,
}

/// The cache file and what it held when opened.
pub struct Cache {
    path: PathBuf,
    entries: HashMap<Key, Eval>,
    /// Lines that did not parse.
    pub skipped: usize,
}

impl Cache {
    /// Opens (or starts) the cache at `path`; with `read` false, earlier lines are ignored
    /// (a fresh run that still records its results).
    pub fn open(path: &Path, read: bool) -> std::io::Result<Cache> {
        let mut entries = HashMap::new();
        let mut skipped = 0;
        if read && path.exists() {
            for line in std::fs::read_to_string(path)?.lines() {
                match serde_json::from_str::<Line>(line) {
                    Ok(l) => {
                        entries.insert(l.key, l.eval);
                    }
                    Err(_) => skipped += 1,
                }
            }
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        Ok(Cache {
            path: path.to_path_buf(),
            entries,
            skipped,
        })
    }

    /// The cached result for a key.
    pub fn get(&self, key: &Key) -> Option<&Eval> {
        self.entries.get(key)
    }

    /// Records a result (appended and flushed at once).
    pub fn put(&mut self, key: Key, eval: Eval) -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        let line = serde_json::to_string(&Line {
            key: key.clone(),
            eval: eval.clone(),
        })
        .expect("a cache line serializes");
        writeln!(f, "{line}")?;
        f.flush()?;
        self.entries.insert(key, eval);
        Ok(())
    }

    /// Results held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every result held, in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = (&Key, &Eval)> {
        self.entries.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::super::evo::{Gate, Objective};
    use super::super::space::{Genome, Space};
    use super::*;
    use fp8_sdpa::{Arch, Family, Precision};

    fn key(v: &str) -> Key {
        Key {
            variant: v.into(),
            precision: "f16".into(),
            head_dim: 128,
            shape_class: "prefill".into(),
            shape: "4x4096x4096x16/16".into(),
            device: "NVIDIA H100 80GB HBM3".into(),
            driver: 13000,
            nvrtc: "13.0".into(),
            kernel: "k1".into(),
            settings: "prune 1.15".into(),
        }
    }

    #[test]
    fn results_survive_a_restart_and_bad_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub").join("cache.jsonl");
        let mut c = Cache::open(&p, true).unwrap();
        c.put(key("a"), Eval::timed(11.0, 10.0)).unwrap();
        c.put(key("b"), Eval::failed(Gate::Compile, "spill: 8 bytes"))
            .unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"{\"truncated by Ctrl-C\n")
            .unwrap();
        let c = Cache::open(&p, true).unwrap();
        assert_eq!((c.len(), c.skipped), (2, 1));
        assert_eq!(c.get(&key("a")).unwrap().full_us, Some(10.0));
        assert_eq!(c.get(&key("b")).unwrap().gate, Gate::Compile);
        let mut other = key("a");
        other.driver = 12080;
        assert!(
            c.get(&other).is_none(),
            "another driver's timing is not reused"
        );
        let mut edited = key("a");
        edited.kernel = "k2".into();
        assert!(
            c.get(&edited).is_none(),
            "an edited kernel is measured again"
        );
        assert_eq!(Cache::open(&p, false).unwrap().len(), 0);
    }

    /// An objective that answers from the cache first: a resumed search makes the same
    /// decisions and measures nothing twice.
    struct Cached<'a> {
        cache: &'a mut Cache,
        measured: usize,
    }

    impl Objective for Cached<'_> {
        fn evaluate(&mut self, space: &Space, g: &Genome, _: Option<f64>) -> Eval {
            let k = key(&space.variant(g).key());
            if let Some(e) = self.cache.get(&k) {
                return e.clone();
            }
            self.measured += 1;
            let e = Eval::timed(2.0, 1.0 + (space.variant(g).tile_n as f64 - 150.0).abs());
            self.cache.put(k, e.clone()).unwrap();
            e
        }
    }

    #[test]
    fn a_resumed_search_repeats_its_decisions_without_measuring_again() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cache.jsonl");
        let s = Space::new(Family::Hopper, Arch::Sm90a, Precision::F16, 128, false).unwrap();
        let cfg = super::super::evo::Config {
            budget: 20,
            seed: 9,
            ..Default::default()
        };
        // A first run stopped after 12 evaluations...
        let mut c = Cache::open(&p, true).unwrap();
        let mut o = Cached {
            cache: &mut c,
            measured: 0,
        };
        let part = super::super::evo::search(
            &s,
            &super::super::evo::Config { budget: 12, ..cfg },
            &mut o,
            &[],
        );
        assert_eq!(o.measured, 12);
        // ... then resumed with the full budget.
        let mut c = Cache::open(&p, true).unwrap();
        let mut o = Cached {
            cache: &mut c,
            measured: 0,
        };
        let full = super::super::evo::search(&s, &cfg, &mut o, &[]);
        assert_eq!(o.measured, 8, "only the 8 new candidates are measured");
        let g = |o: &super::super::evo::Outcome| {
            o.records
                .iter()
                .map(|r| r.genome.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(g(&part)[..], g(&full)[..12]);
    }
}
