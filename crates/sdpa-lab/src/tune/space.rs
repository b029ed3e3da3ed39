//! The search space: a family's knobs, each a discrete domain, split into the two layers the
//! seeds' EvoEngineer-Full traversed (macro: the kernel's structure; micro: its sizes). A
//! genome holds one value index per knob; it maps to a `Variant`, which the library's own
//! rules (`KernelSpec::validate`) accept or reject for the problem class.

use fp8_sdpa::kernels::registry;
use fp8_sdpa::{Arch, Family, KernelSpec, Precision, SyncPolicy, Variant};
use rand::Rng;

/// Which layer a knob belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// Structure: warpgroups, persistence, pipeline depth, ping-pong, sync policy.
    Macro,
    /// Sizes: tiles, warps, stages within a structure, swizzle, register split.
    Micro,
}

/// What a knob sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    /// Hopper: consumer warpgroups (warps 12 or 16), which also sets tile_m = 64 per group.
    Consumers,
    TileM,
    TileN,
    Warps,
    Stages,
    MinBlocks,
    Persistent,
    Overlap,
    PingPong,
    Swizzle,
    HalfSteps,
    /// Portable: 0 block, 1 light, 2 decoupled.
    Sync,
    /// Decode: keys each warp takes per step (tile_n = this x warps).
    KeysPerWarp,
}

/// One knob and its domain.
#[derive(Debug, Clone)]
pub struct Dim {
    /// The knob.
    pub knob: Knob,
    /// Its layer.
    pub layer: Layer,
    /// Its values.
    pub values: Vec<u32>,
}

/// A genome: one value index per dimension of a space.
pub type Genome = Vec<u8>;

/// A family's space for one problem class.
#[derive(Debug, Clone)]
pub struct Space {
    /// The family.
    pub family: Family,
    /// Where candidates must be valid.
    pub arch: Arch,
    /// Problem class.
    pub precision: Precision,
    /// Head dim.
    pub head_dim: u32,
    /// Causal class.
    pub causal: bool,
    /// The dimensions.
    pub dims: Vec<Dim>,
    base: Variant,
}

fn d(knob: Knob, layer: Layer, values: &[u32]) -> Dim {
    Dim {
        knob,
        layer,
        values: values.to_vec(),
    }
}

impl Space {
    /// The space of `family` for a problem class; `None` for a family with no tunable kernel.
    pub fn new(
        family: Family,
        arch: Arch,
        precision: Precision,
        head_dim: u32,
        causal: bool,
    ) -> Option<Space> {
        use Knob::*;
        use Layer::*;
        let (dims, base) = match family {
            Family::Hopper => (
                vec![
                    d(Consumers, Macro, &[2, 3]),
                    d(Persistent, Macro, &[0, 1]),
                    d(PingPong, Macro, &[0, 1]),
                    d(Stages, Macro, &[2, 3, 4]),
                    d(
                        TileN,
                        Micro,
                        &[64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256],
                    ),
                    d(Overlap, Micro, &[0, 1]),
                ],
                "hopper.m128.n128.w12.s2.b1.w4ex",
            ),
            // Portable: `Persistent` is the stream (persistent decoupled sync, 8-bit K/V; the
            // rules reject it with block or light sync).
            Family::Portable => (
                vec![
                    d(Persistent, Macro, &[0, 1]),
                    d(Stages, Macro, &[1, 2, 3, 4]),
                    d(Sync, Macro, &[0, 1, 2]),
                    d(TileM, Micro, &[32, 64, 128, 256]),
                    d(TileN, Micro, &[32, 64, 128]),
                    d(Warps, Micro, &[2, 4, 8]),
                    d(Swizzle, Micro, &[0, 1]),
                    d(HalfSteps, Micro, &[0, 1]),
                    d(MinBlocks, Micro, &[1, 2]),
                ],
                "portable.m64.n64.w4.s2.b1.ctex",
            ),
            // Decode: warps split each key step (their count is the CTA's structure), the
            // ring depth, then each warp's keys per step and CTAs per SM (which also sets the
            // split count). Keys per warp rather than tile N: the exhaustive FP8-KV
            // space ranked by keys per warp (16 best at every warp count), a ridge across
            // (tile N, warps) that per-knob crossover cannot follow; from 128 keys per warp
            // every variant was at least 1.096x the best.
            Family::Decode => (
                vec![
                    d(Warps, Macro, &[1, 2, 4, 8]),
                    d(Stages, Macro, &[2, 3, 4, 5]),
                    d(KeysPerWarp, Micro, &[16, 32, 64]),
                    d(MinBlocks, Micro, &[1, 2, 3, 4]),
                ],
                "decode.m16.n64.w4.s3.b2.cex",
            ),
            Family::Reference => return None,
        };
        Some(Space {
            family,
            arch,
            precision,
            head_dim,
            causal,
            dims,
            base: base.parse().expect("base variant keys parse"),
        })
    }

    /// The variant a genome stands for.
    pub fn variant(&self, g: &Genome) -> Variant {
        let mut v = self.base;
        let mut keys_per_warp = None;
        for (dim, &i) in self.dims.iter().zip(g) {
            let x = dim.values[i as usize % dim.values.len()];
            match dim.knob {
                Knob::Consumers => {
                    v.warps = 4 * (x + 1);
                    v.tile_m = 64 * x;
                }
                Knob::TileM => v.tile_m = x,
                Knob::TileN => v.tile_n = x,
                Knob::Warps => v.warps = x,
                Knob::Stages => v.stages = x,
                Knob::MinBlocks => v.min_blocks = x,
                Knob::Persistent => v.persistent = x == 1,
                Knob::Overlap => v.overlap = x == 1,
                Knob::PingPong => v.pingpong = x == 1,
                Knob::Swizzle => v.swizzle = x == 1,
                Knob::HalfSteps => v.half_steps = x == 1,
                Knob::Sync => {
                    v.sync =
                        [SyncPolicy::Block, SyncPolicy::Light, SyncPolicy::Decoupled][x as usize]
                }
                Knob::KeysPerWarp => keys_per_warp = Some(x),
            }
        }
        if let Some(k) = keys_per_warp {
            v.tile_n = k * v.warps;
        }
        v
    }

    /// The spec a genome is compiled as.
    pub fn spec(&self, g: &Genome) -> KernelSpec {
        KernelSpec {
            variant: self.variant(g),
            precision: self.precision,
            head_dim: self.head_dim,
            causal: self.causal,
        }
    }

    /// Whether the library's rules accept the genome's spec on the space's arch.
    pub fn valid(&self, g: &Genome) -> bool {
        self.spec(g).validate(self.arch).is_ok()
    }

    /// The genome of `v`, if every knob's value is in its domain.
    pub fn genome_of(&self, v: &Variant) -> Option<Genome> {
        let g: Option<Genome> = self
            .dims
            .iter()
            .map(|dim| {
                let x = match dim.knob {
                    Knob::Consumers => v.warps / 4 - 1,
                    Knob::TileM => v.tile_m,
                    Knob::TileN => v.tile_n,
                    Knob::Warps => v.warps,
                    Knob::Stages => v.stages,
                    Knob::MinBlocks => v.min_blocks,
                    Knob::Persistent => v.persistent as u32,
                    Knob::Overlap => v.overlap as u32,
                    Knob::PingPong => v.pingpong as u32,
                    Knob::Swizzle => v.swizzle as u32,
                    Knob::HalfSteps => v.half_steps as u32,
                    Knob::Sync => v.sync as u32,
                    Knob::KeysPerWarp => v.tile_n / v.warps.max(1),
                };
                dim.values.iter().position(|&y| y == x).map(|i| i as u8)
            })
            .collect();
        g.filter(|g| self.variant(g) == *v)
    }

    /// The registry's default for the class, as a genome, when it lies in the space.
    pub fn default_genome(&self) -> Option<Genome> {
        let v = if self.family == Family::Decode {
            registry::decode_default(self.arch, self.precision, self.head_dim)
        } else {
            registry::default_variant(self.arch, self.precision, self.head_dim, self.causal)
        };
        (v.family == self.family)
            .then(|| self.genome_of(&v))
            .flatten()
    }

    /// A uniformly drawn genome (valid or not).
    pub fn random(&self, rng: &mut impl Rng) -> Genome {
        self.dims
            .iter()
            .map(|d| rng.random_range(0..d.values.len()) as u8)
            .collect()
    }

    /// Makes `g` valid: first by redrawing its micro knobs, then any knob, a bounded number
    /// of times; `None` when no valid genome turned up (the caller redraws).
    pub fn repair(&self, g: &Genome, rng: &mut impl Rng) -> Option<Genome> {
        if self.valid(g) {
            return Some(g.clone());
        }
        for attempt in 0..64 {
            let mut c = g.clone();
            let layer_only = attempt < 32;
            for (i, dim) in self.dims.iter().enumerate() {
                if (!layer_only || dim.layer == Layer::Micro) && rng.random_bool(0.5) {
                    c[i] = rng.random_range(0..dim.values.len()) as u8;
                }
            }
            if self.valid(&c) {
                return Some(c);
            }
        }
        None
    }

    /// Every valid genome (for exhaustive comparisons on small spaces).
    pub fn enumerate_valid(&self) -> Vec<Genome> {
        let mut out = Vec::new();
        let mut g: Genome = vec![0; self.dims.len()];
        loop {
            if self.valid(&g) {
                out.push(g.clone());
            }
            let mut i = 0;
            loop {
                if i == g.len() {
                    return out;
                }
                g[i] += 1;
                if (g[i] as usize) < self.dims[i].values.len() {
                    break;
                }
                g[i] = 0;
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn hopper() -> Space {
        Space::new(Family::Hopper, Arch::Sm90a, Precision::F16, 128, false).unwrap()
    }

    #[test]
    fn genomes_map_to_variants_and_back() {
        for s in [
            hopper(),
            Space::new(Family::Portable, Arch::Sm80, Precision::F16, 64, true).unwrap(),
            Space::new(Family::Decode, Arch::Sm90a, Precision::Fp8KvF16, 128, false).unwrap(),
        ] {
            let valid = s.enumerate_valid();
            assert!(valid.len() > 10, "{:?}: {}", s.family, valid.len());
            for g in &valid {
                let v = s.variant(g);
                assert_eq!(s.genome_of(&v).as_ref(), Some(g), "{}", v.key());
                assert_eq!(v.family, s.family);
            }
        }
        // The shipped Hopper default for this class is in the space.
        let h = hopper();
        let g = h.default_genome().unwrap();
        assert_eq!(h.variant(&g).key(), "hopper.m128.n128.w12.s2.b1.w4pogex");
        let dec = Space::new(Family::Decode, Arch::Sm90a, Precision::F16, 128, false).unwrap();
        let g = dec.default_genome().unwrap();
        assert_eq!(dec.variant(&g).key(), "decode.m16.n64.w4.s3.b2.cex");
    }

    #[test]
    fn repair_returns_valid_genomes_only() {
        let s = hopper();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut repaired = 0;
        for _ in 0..200 {
            let g = s.random(&mut rng);
            if let Some(r) = s.repair(&g, &mut rng) {
                assert!(s.valid(&r));
                if r != g {
                    repaired += 1;
                }
            }
        }
        assert!(
            repaired > 0,
            "some random genomes need repair (ping-pong with three warpgroups)"
        );
    }
}
