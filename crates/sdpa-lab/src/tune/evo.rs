//! EvoEngineer-Full over parameters: a population of genomes; elitist truncation with K elites
//! surviving unchanged; rank-based parents; uniform crossover and per-knob mutation over each
//! knob's discrete domain; invalid children repaired or redrawn, never evaluated; two layers
//! (the first generations vary the macro knobs, the rest the micro knobs under the elites'
//! structures). Deterministic for a seed: the random stream depends only on the seed and on
//! the results, which a resumed run reads back from the cache unchanged.

use super::space::{Genome, Layer, Space};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The gate a candidate stopped at, cheapest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Gate {
    /// NVRTC compile and the resource gates (no GPU).
    Compile,
    /// The float64 reference on several seeds and ragged shapes.
    Correctness,
    /// The short timing run: slower than the best so far by the prune factor.
    Prune,
    /// The full timing run (a measured candidate).
    Timed,
}

/// What an evaluation found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Eval {
    /// The last gate reached.
    pub gate: Gate,
    /// Why it stopped there (empty when timed).
    pub reason: String,
    /// Short-run median, µs.
    pub short_us: Option<f64>,
    /// Full-run median, µs.
    pub full_us: Option<f64>,
}

impl Eval {
    /// A failure at `gate`.
    pub fn failed(gate: Gate, reason: impl Into<String>) -> Eval {
        Eval {
            gate,
            reason: reason.into(),
            short_us: None,
            full_us: None,
        }
    }

    /// A fully timed candidate.
    pub fn timed(short_us: f64, full_us: f64) -> Eval {
        Eval {
            gate: Gate::Timed,
            reason: String::new(),
            short_us: Some(short_us),
            full_us: Some(full_us),
        }
    }

    /// Lower is better: the full time, else the short one (pruned), else infinity.
    pub fn cost(&self) -> f64 {
        self.full_us.or(self.short_us).unwrap_or(f64::INFINITY)
    }
}

/// Evaluates candidates (the GPU gates, or a synthetic cost in tests). `best_us` is the best
/// full time so far, for pruning.
pub trait Objective {
    /// Runs the gates on one spec.
    fn evaluate(&mut self, space: &Space, g: &Genome, best_us: Option<f64>) -> Eval;

    /// Whether the search must stop before its budget (e.g. a time limit ran out).
    fn should_stop(&self) -> bool {
        false
    }
}

/// Search settings.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Genomes per generation.
    pub population: usize,
    /// Survivors per generation, unchanged (K).
    pub elites: usize,
    /// Evaluations (distinct candidates) to spend.
    pub budget: usize,
    /// Generations that vary the macro knobs before the micro ones.
    pub macro_generations: usize,
    /// Per-knob mutation probability (at least one knob of the layer always changes).
    pub mutation: f64,
    /// Seed of the random stream.
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            population: 8,
            elites: 3,
            budget: 40,
            macro_generations: 2,
            mutation: 0.3,
            seed: 0,
        }
    }
}

/// One evaluated candidate, in evaluation order.
#[derive(Debug, Clone)]
pub struct Record {
    /// Evaluation index (0-based).
    pub index: usize,
    /// Generation it was born in (0 = the initial population).
    pub generation: usize,
    /// The layer its generation varied.
    pub layer: Layer,
    /// The genome.
    pub genome: Genome,
    /// What the gates found.
    pub eval: Eval,
}

/// A search's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every evaluation, in order.
    pub records: Vec<Record>,
}

impl Outcome {
    /// The cheapest record.
    pub fn best(&self) -> Option<&Record> {
        self.records
            .iter()
            .filter(|r| r.eval.gate == Gate::Timed)
            .min_by(|a, b| a.eval.cost().total_cmp(&b.eval.cost()))
    }

    /// Best cost after each evaluation (infinity before the first timed one).
    pub fn best_so_far(&self) -> Vec<f64> {
        let mut best = f64::INFINITY;
        self.records
            .iter()
            .map(|r| {
                if r.eval.gate == Gate::Timed {
                    best = best.min(r.eval.cost());
                }
                best
            })
            .collect()
    }
}

struct Run<'a, O: Objective> {
    space: &'a Space,
    objective: &'a mut O,
    seen: HashMap<Genome, Eval>,
    records: Vec<Record>,
    budget: usize,
    best: Option<f64>,
}

impl<O: Objective> Run<'_, O> {
    fn spent(&self) -> bool {
        self.records.len() >= self.budget || self.objective.should_stop()
    }

    /// Evaluates `g` once; a genome seen before returns its result without spending budget.
    fn eval(&mut self, g: &Genome, generation: usize, layer: Layer) -> Eval {
        if let Some(e) = self.seen.get(g) {
            return e.clone();
        }
        let e = self.objective.evaluate(self.space, g, self.best);
        if e.gate == Gate::Timed {
            self.best = Some(self.best.map_or(e.cost(), |b| b.min(e.cost())));
        }
        self.seen.insert(g.clone(), e.clone());
        self.records.push(Record {
            index: self.records.len(),
            generation,
            layer,
            genome: g.clone(),
            eval: e.clone(),
        });
        e
    }
}

/// Rank-based choice: the i-th best of n is drawn with weight n - i.
fn pick(rng: &mut ChaCha8Rng, n: usize) -> usize {
    let total = n * (n + 1) / 2;
    let mut x = rng.random_range(0..total);
    for i in 0..n {
        let w = n - i;
        if x < w {
            return i;
        }
        x -= w;
    }
    n - 1
}

/// Runs the search. `start` genomes (e.g. the shipped default) join the first population.
pub fn search<O: Objective>(
    space: &Space,
    cfg: &Config,
    objective: &mut O,
    start: &[Genome],
) -> Outcome {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut run = Run {
        space,
        objective,
        seen: HashMap::new(),
        records: Vec::new(),
        budget: cfg.budget,
        best: None,
    };
    // Generation 0: the given genomes, then random valid ones.
    let mut pop: Vec<(Genome, f64)> = Vec::new();
    let mut tries = 0;
    let mut queue: Vec<Genome> = start.iter().filter(|g| space.valid(g)).cloned().collect();
    while pop.len() < cfg.population && !run.spent() && tries < 1000 * cfg.population {
        tries += 1;
        let g = if queue.is_empty() {
            match space.repair(&space.random(&mut rng), &mut rng) {
                Some(g) => g,
                None => continue,
            }
        } else {
            queue.remove(0)
        };
        if pop.iter().any(|(p, _)| *p == g) {
            continue;
        }
        let c = run.eval(&g, 0, Layer::Macro).cost();
        pop.push((g, c));
    }
    let mut generation = 0;
    let mut stale = 0;
    while !run.spent() && !pop.is_empty() && stale < 20 {
        generation += 1;
        let layer = if generation <= cfg.macro_generations {
            Layer::Macro
        } else {
            Layer::Micro
        };
        pop.sort_by(|a, b| a.1.total_cmp(&b.1));
        let elites: Vec<(Genome, f64)> = pop.iter().take(cfg.elites).cloned().collect();
        let mut next = elites.clone();
        let before = run.records.len();
        let mut attempts = 0;
        while next.len() < cfg.population && !run.spent() && attempts < 200 * cfg.population {
            attempts += 1;
            let a = &pop[pick(&mut rng, pop.len())].0;
            let b = &pop[pick(&mut rng, pop.len())].0;
            let mut child = a.clone();
            let knobs: Vec<usize> = (0..space.dims.len())
                .filter(|&i| space.dims[i].layer == layer)
                .collect();
            for &i in &knobs {
                if rng.random_bool(0.5) {
                    child[i] = b[i];
                }
            }
            let forced = knobs[rng.random_range(0..knobs.len())];
            for &i in &knobs {
                if i == forced || rng.random_bool(cfg.mutation) {
                    child[i] = rng.random_range(0..space.dims[i].values.len()) as u8;
                }
            }
            let Some(child) = space.repair(&child, &mut rng) else {
                continue;
            };
            if next.iter().any(|(g, _)| *g == child) || run.seen.contains_key(&child) {
                continue; // already evaluated: breed another
            }
            let c = run.eval(&child, generation, layer).cost();
            next.push((child, c));
        }
        stale = if run.records.len() == before {
            stale + 1
        } else {
            0
        };
        pop = next;
    }
    Outcome {
        records: run.records,
    }
}

/// Random search with the same budget: valid distinct genomes drawn uniformly.
pub fn random_search<O: Objective>(
    space: &Space,
    budget: usize,
    seed: u64,
    objective: &mut O,
) -> Outcome {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut run = Run {
        space,
        objective,
        seen: HashMap::new(),
        records: Vec::new(),
        budget,
        best: None,
    };
    let mut tries = 0;
    while !run.spent() && tries < 1000 * budget.max(1) {
        tries += 1;
        let g = space.random(&mut rng);
        if space.valid(&g) && !run.seen.contains_key(&g) {
            run.eval(&g, 0, Layer::Micro);
        }
    }
    Outcome {
        records: run.records,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_sdpa::{Arch, Family, Precision};

    /// A synthetic cost with structure (per-knob preferences and a macro x micro interaction)
    /// and a hash term, so that neighbours are related but the landscape is not separable.
    pub(crate) struct Synthetic {
        pub calls: usize,
    }

    impl Objective for Synthetic {
        fn evaluate(&mut self, space: &Space, g: &Genome, _best: Option<f64>) -> Eval {
            self.calls += 1;
            let v = space.variant(g);
            let mut t = 100.0;
            t += (v.tile_n as f64 - 144.0).abs() * 0.5;
            t += if v.persistent { 0.0 } else { 20.0 };
            t += if v.overlap == v.pingpong { 0.0 } else { 15.0 };
            t += (v.stages as f64 - 3.0).abs() * 10.0;
            t += if v.warps == 16 && v.tile_n > 128 {
                30.0
            } else {
                0.0
            };
            let h = v.key().bytes().fold(1469598103934665603u64, |h, b| {
                (h ^ b as u64).wrapping_mul(1099511628211)
            });
            t += (h % 1000) as f64 / 1000.0 * 3.0;
            Eval::timed(t * 1.1, t)
        }
    }

    fn space() -> Space {
        Space::new(Family::Hopper, Arch::Sm90a, Precision::F16, 128, false).unwrap()
    }

    #[test]
    fn searches_are_deterministic_for_a_seed_and_never_repeat_or_evaluate_invalid_genomes() {
        let s = space();
        let cfg = Config {
            budget: 30,
            seed: 5,
            ..Config::default()
        };
        let a = search(&s, &cfg, &mut Synthetic { calls: 0 }, &[]);
        let b = search(&s, &cfg, &mut Synthetic { calls: 0 }, &[]);
        let keys = |o: &Outcome| {
            o.records
                .iter()
                .map(|r| r.genome.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&a), keys(&b));
        assert_eq!(a.records.len(), 30);
        let mut seen = std::collections::HashSet::new();
        for r in &a.records {
            assert!(s.valid(&r.genome));
            assert!(seen.insert(r.genome.clone()), "evaluated twice");
        }
        let c = search(
            &s,
            &Config { seed: 6, ..cfg },
            &mut Synthetic { calls: 0 },
            &[],
        );
        assert_ne!(keys(&a), keys(&c));
        // Both layers ran, macro first.
        let layers: Vec<Layer> = a.records.iter().map(|r| r.layer).collect();
        assert!(layers.contains(&Layer::Micro));
        let first_micro = layers.iter().position(|&l| l == Layer::Micro).unwrap();
        assert!(layers[first_micro..].iter().all(|&l| l == Layer::Micro));
    }

    /// Stops after `left` evaluations, whatever the budget.
    struct Stopping {
        inner: Synthetic,
        left: usize,
    }

    impl Objective for Stopping {
        fn evaluate(&mut self, space: &Space, g: &Genome, best: Option<f64>) -> Eval {
            self.left = self.left.saturating_sub(1);
            self.inner.evaluate(space, g, best)
        }
        fn should_stop(&self) -> bool {
            self.left == 0
        }
    }

    #[test]
    fn a_stop_request_ends_the_search_before_its_budget() {
        let mut o = Stopping {
            inner: Synthetic { calls: 0 },
            left: 7,
        };
        let out = search(
            &space(),
            &Config {
                budget: 40,
                ..Config::default()
            },
            &mut o,
            &[],
        );
        assert_eq!(out.records.len(), 7);
        let r = random_search(
            &space(),
            40,
            0,
            &mut Stopping {
                inner: Synthetic { calls: 0 },
                left: 5,
            },
        );
        assert_eq!(r.records.len(), 5);
    }

    #[test]
    fn elites_survive_and_the_best_never_gets_worse() {
        let o = search(
            &space(),
            &Config {
                budget: 40,
                seed: 1,
                ..Config::default()
            },
            &mut Synthetic { calls: 0 },
            &[],
        );
        let curve = o.best_so_far();
        assert!(curve.windows(2).all(|w| w[1] <= w[0]));
    }

    #[test]
    fn the_tuner_finds_the_exhaustive_best_in_a_fraction_of_the_space_and_beats_random() {
        let s = space();
        let all = s.enumerate_valid();
        let mut ex = Synthetic { calls: 0 };
        let best = all
            .iter()
            .map(|g| ex.evaluate(&s, g, None).cost())
            .fold(f64::INFINITY, f64::min);
        let budget = all.len() / 4;
        let (mut hits, mut random_hits, mut tuner_sum, mut random_sum) = (0, 0, 0.0, 0.0);
        let seeds = 10;
        for seed in 0..seeds {
            let cfg = Config {
                budget,
                seed,
                ..Config::default()
            };
            let t = search(&s, &cfg, &mut Synthetic { calls: 0 }, &[]);
            let r = random_search(&s, budget, seed, &mut Synthetic { calls: 0 });
            let tb = t.best().unwrap().eval.cost();
            let rb = r.best().unwrap().eval.cost();
            hits += usize::from(tb <= best * 1.02);
            random_hits += usize::from(rb <= best * 1.02);
            tuner_sum += tb;
            random_sum += rb;
        }
        eprintln!(
            "synthetic objective: {} valid genomes, budget {budget}: tuner within 2 % of the \
             best in {hits}/{seeds} seeds (random search: {random_hits}); mean best {:.2} (tuner) \
             vs {:.2} (random), exhaustive {best:.2}",
            all.len(),
            tuner_sum / seeds as f64,
            random_sum / seeds as f64
        );
        assert!(
            hits >= 8,
            "within 2 % of the exhaustive best ({best:.2}) in {hits} of {seeds} seeds with {budget} of {} evaluations",
            all.len()
        );
        assert!(
            hits > random_hits,
            "tuner {hits} vs random {random_hits} seeds near the best"
        );
        assert!(
            tuner_sum <= random_sum,
            "tuner {tuner_sum:.1} vs random {random_sum:.1}"
        );
    }
}
