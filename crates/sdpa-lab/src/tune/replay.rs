//! Replaying a search from a result cache, without a GPU: the objective answers each candidate
//! with its measured result. Over a cache that holds a whole space (an exhaustive run), this
//! measures the search itself: for many seeds, the best found after each evaluation by the
//! tuner and by random search with the same budget, against the space's true best.

use super::cache::Cache;
use super::evo::{self, Eval, Gate, Objective, Outcome};
use super::space::{Genome, Space};
use std::collections::HashMap;

/// Candidates answered from a cache's results for one problem class.
pub struct Replay {
    results: HashMap<String, Eval>,
}

impl Replay {
    /// The results of `cache` for the space's class (precision, head dim) and `shape_class`,
    /// keyed by variant; the newest line wins where a variant was measured twice.
    pub fn new(cache: &Cache, space: &Space, shape_class: &str) -> Replay {
        let results = cache
            .entries()
            .filter(|(k, _)| {
                k.precision == space.precision.name()
                    && k.head_dim == space.head_dim
                    && k.shape_class == shape_class
            })
            .map(|(k, e)| (k.variant.clone(), e.clone()))
            .collect();
        Replay { results }
    }

    /// Variants with a result.
    pub fn measured(&self) -> usize {
        self.results.len()
    }

    /// The fastest timed result, µs.
    pub fn optimum(&self) -> Option<(String, f64)> {
        self.results
            .iter()
            .filter(|(_, e)| e.gate == Gate::Timed)
            .map(|(v, e)| (v.clone(), e.cost()))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Valid variants of `space` without a result (a replay over them is not exhaustive).
    pub fn missing(&self, space: &Space) -> usize {
        space
            .enumerate_valid()
            .iter()
            .filter(|g| !self.results.contains_key(&space.variant(g).key()))
            .count()
    }
}

impl Objective for Replay {
    fn evaluate(&mut self, space: &Space, g: &Genome, _best_us: Option<f64>) -> Eval {
        // Full times regardless of pruning: the curves compare what each search found.
        self.results
            .get(&space.variant(g).key())
            .cloned()
            .unwrap_or_else(|| Eval::failed(Gate::Compile, "not in the replayed cache"))
    }
}

/// One search's best-so-far after each evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// `evo` or `random`.
    pub search: &'static str,
    /// Its seed.
    pub seed: u64,
    /// Best full time after evaluation i + 1 (infinity before the first timed one).
    pub best_us: Vec<f64>,
}

impl Curve {
    /// Evaluations until the best came within `tol` (0.02: 2 %) of `optimum`.
    pub fn evals_to(&self, optimum: f64, tol: f64) -> Option<usize> {
        self.best_us
            .iter()
            .position(|&b| b <= optimum * (1.0 + tol))
            .map(|i| i + 1)
    }
}

/// The tuner (started, as in `tune`, from `start`) and random search, each with `budget`
/// evaluations, for seeds `first..first + seeds`.
pub fn curves(
    space: &Space,
    replay: &mut Replay,
    budget: usize,
    first: u64,
    seeds: u64,
    start: &[Genome],
) -> Vec<Curve> {
    let mut out = Vec::new();
    for seed in first..first + seeds {
        let cfg = evo::Config {
            budget,
            seed,
            ..evo::Config::default()
        };
        let curve = |search, o: Outcome| Curve {
            search,
            seed,
            best_us: o.best_so_far(),
        };
        out.push(curve("evo", evo::search(space, &cfg, replay, start)));
        out.push(curve(
            "random",
            evo::random_search(space, budget, seed, replay),
        ));
    }
    out
}

/// Mean over seeds of best / optimum after each evaluation (evaluations before the first
/// timed candidate are left out of the mean).
pub fn mean_ratio(curves: &[Curve], search: &str, optimum: f64) -> Vec<Option<f64>> {
    let of: Vec<&Curve> = curves.iter().filter(|c| c.search == search).collect();
    let n = of.iter().map(|c| c.best_us.len()).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            let v: Vec<f64> = of
                .iter()
                .filter_map(|c| c.best_us.get(i).or(c.best_us.last()).copied())
                .filter(|b| b.is_finite())
                .map(|b| b / optimum)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        })
        .collect()
}

/// Best-so-far / optimum against evaluations: every seed faint, the mean over seeds bold,
/// the tuner blue and random search orange.
pub fn plot(
    curves: &[Curve],
    optimum: f64,
    title: &str,
    path: &std::path::Path,
) -> Result<(), String> {
    use plotters::prelude::*;
    let n = curves
        .iter()
        .map(|c| c.best_us.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let finite = curves
        .iter()
        .flat_map(|c| c.best_us.iter())
        .filter(|b| b.is_finite())
        .map(|b| b / optimum);
    let top = finite.fold(1.05f64, f64::max).min(1.6);
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(1f64..n as f64, 0.99f64..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("evaluations")
        .y_desc("best so far / exhaustive best")
        .draw()
        .map_err(|e| e.to_string())?;
    for (search, color) in [
        ("evo", RGBColor(31, 119, 180)),
        ("random", RGBColor(255, 127, 14)),
    ] {
        for c in curves.iter().filter(|c| c.search == search) {
            let pts = c
                .best_us
                .iter()
                .enumerate()
                .filter(|(_, b)| b.is_finite())
                .map(|(i, b)| ((i + 1) as f64, (b / optimum).min(top)));
            chart
                .draw_series(LineSeries::new(pts, color.mix(0.25)))
                .map_err(|e| e.to_string())?;
        }
        let mean = mean_ratio(curves, search, optimum);
        let pts: Vec<(f64, f64)> = mean
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.map(|m| ((i + 1) as f64, m.min(top))))
            .collect();
        let label = if search == "evo" {
            "tuner (mean)"
        } else {
            "random (mean)"
        };
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(3)))
            .map_err(|e| e.to_string())?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_sdpa::{Arch, Family, Precision};

    /// The decode family's FP8-KV D128 space measured exhaustively on the H100: every valid
    /// variant's gate and time.
    const H100_DECODE: &str =
        include_str!("../../tests/fixtures/tune/h100_decode_fp8kv_d128.jsonl");

    fn replay() -> (Space, Replay) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        std::fs::write(&p, H100_DECODE).unwrap();
        let cache = Cache::open(&p, true).unwrap();
        let space =
            Space::new(Family::Decode, Arch::Sm90a, Precision::Fp8KvF16, 128, false).unwrap();
        let r = Replay::new(&cache, &space, "decode");
        (space, r)
    }

    #[test]
    fn the_fixture_lies_in_the_space() {
        // Measured with the staged decode; fragment decode freed shared
        // memory since, so the space holds more valid variants than the fixture measured,
        // and the replay counts those as failed at the first gate.
        let (space, r) = replay();
        assert!(r.measured() >= 100);
        for v in r.results.keys() {
            let v: fp8_sdpa::Variant = v.parse().unwrap();
            assert!(
                space.genome_of(&v).is_some() || v.tile_n / v.warps > 64,
                "{v}"
            );
        }
        let (v, us) = r.optimum().unwrap();
        assert!(v.starts_with("decode.") && us > 0.0);
        assert!(r.missing(&space) < space.enumerate_valid().len());
    }

    #[test]
    fn replay_is_deterministic_and_curves_never_rise() {
        let (space, mut r) = replay();
        let start: Vec<Genome> = space.default_genome().into_iter().collect();
        let a = curves(&space, &mut r, 20, 0, 3, &start);
        let b = curves(&space, &mut r, 20, 0, 3, &start);
        assert_eq!(a, b);
        for c in &a {
            assert!(c.best_us.windows(2).all(|w| w[1] <= w[0]), "{c:?}");
            assert_eq!(c.best_us.len(), 20);
        }
    }

    #[test]
    fn an_absent_variant_fails_its_first_gate() {
        let (space, _) = replay();
        let mut empty = Replay {
            results: HashMap::new(),
        };
        let g = space.default_genome().unwrap();
        let e = empty.evaluate(&space, &g, None);
        assert_eq!(e.gate, Gate::Compile);
    }
}
