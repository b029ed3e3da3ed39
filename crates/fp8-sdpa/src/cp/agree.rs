//! What every rank of a ring must agree on before the first transfer, as pure arithmetic.
//!
//! Each rank encodes its [`ProblemDesc`] into [`WORDS`] `u64`s; the ring all-gathers them
//! (one collective of fixed size, which cannot mismatch) and every rank runs [`compare`] on
//! the same gathered words, so every rank reaches the same verdict: all enter the ring, or
//! none does and all return the same error naming the field and the ranks. Without this, a
//! rank with other sizes posts sends and receives of other lengths and its peers wait
//! forever.

use crate::dtype::Precision;
use std::fmt;

/// Words in an encoded descriptor.
pub const WORDS: usize = 12;

/// Layout version of the encoding; ranks of different builds are told apart by it.
pub const FORMAT_VERSION: u64 = 1;

/// The first word of every descriptor: "cpdesc" and the format version, so a rank of
/// another build, or a buffer that was never written, is recognized as such.
const MAGIC: u64 = 0x6370_6465_7363_0000 | FORMAT_VERSION;

/// A rank's own verdict on its arguments, taken before the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Ready for the ring.
    Ready,
    /// Q or O does not hold `[batch, 2 x chunk, heads_q, dim]` elements.
    BufferSize,
    /// No K/V shard was loaded since the last pass.
    NotLoaded,
    /// The ring's merge kernels could not be prepared.
    Setup,
    /// The attention calls of the pass fail validation.
    InvalidCall,
}

impl Status {
    const ALL: [Status; 5] = [
        Status::Ready,
        Status::BufferSize,
        Status::NotLoaded,
        Status::Setup,
        Status::InvalidCall,
    ];

    fn code(self) -> u64 {
        Status::ALL.iter().position(|&s| s == self).unwrap_or(0) as u64
    }

    fn from_code(c: u64) -> Option<Status> {
        Status::ALL.get(usize::try_from(c).ok()?).copied()
    }

    /// What the status means, for the error every rank returns.
    pub fn describe(self) -> &'static str {
        match self {
            Status::Ready => "ready",
            Status::BufferSize => {
                "its Q or O buffer does not hold [batch, 2 x chunk, heads_q, dim] elements"
            }
            Status::NotLoaded => {
                "it has no K/V shard loaded since its last pass (call Ring::load before each run)"
            }
            Status::Setup => "its merge kernels could not be prepared",
            Status::InvalidCall => "its attention calls fail validation",
        }
    }
}

fn precision_code(p: Precision) -> u64 {
    Precision::ALL.iter().position(|&x| x == p).unwrap_or(0) as u64
}

fn precision_from_code(c: u64) -> Option<Precision> {
    Precision::ALL.get(usize::try_from(c).ok()?).copied()
}

/// One rank's problem as the ring sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProblemDesc {
    /// Ranks in the communicator, as this rank sees it.
    pub world_size: usize,
    /// This rank.
    pub rank: usize,
    /// Batch.
    pub batch: usize,
    /// Tokens per chunk.
    pub chunk: usize,
    /// Query heads.
    pub heads_q: usize,
    /// Key/value heads.
    pub heads_kv: usize,
    /// Head dim.
    pub dim: usize,
    /// Precision path (Q, K/V and O types).
    pub precision: Precision,
    /// Causal mask.
    pub causal: bool,
    /// Softmax scale, compared bit for bit.
    pub scale_bits: u32,
    /// This rank's verdict on its own arguments.
    pub status: Status,
}

/// The fields [`compare`] checks, in word order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// Word 0: magic and format version.
    Format,
    /// Word 1.
    WorldSize,
    /// Word 2.
    Rank,
    /// Word 3.
    Batch,
    /// Word 4.
    Chunk,
    /// Word 5.
    HeadsQ,
    /// Word 6.
    HeadsKv,
    /// Word 7.
    Dim,
    /// Word 8.
    Precision,
    /// Word 9.
    Causal,
    /// Word 10.
    Scale,
    /// Word 11.
    Status,
}

impl Field {
    /// Every field, in word order.
    pub const ALL: [Field; WORDS] = [
        Field::Format,
        Field::WorldSize,
        Field::Rank,
        Field::Batch,
        Field::Chunk,
        Field::HeadsQ,
        Field::HeadsKv,
        Field::Dim,
        Field::Precision,
        Field::Causal,
        Field::Scale,
        Field::Status,
    ];

    /// The field's word in an encoded descriptor.
    pub fn word(self) -> usize {
        Field::ALL.iter().position(|&f| f == self).unwrap_or(0)
    }

    /// The field's name in errors.
    pub fn name(self) -> &'static str {
        match self {
            Field::Format => "descriptor format version",
            Field::WorldSize => "world size",
            Field::Rank => "rank",
            Field::Batch => "batch",
            Field::Chunk => "chunk (tokens per chunk)",
            Field::HeadsQ => "heads_q",
            Field::HeadsKv => "heads_kv",
            Field::Dim => "head dim",
            Field::Precision => "precision",
            Field::Causal => "causal",
            Field::Scale => "softmax scale",
            Field::Status => "status",
        }
    }

    /// A word of this field, readable.
    fn show(self, w: u64) -> String {
        match self {
            Field::Format if w & !0xffff == MAGIC & !0xffff => format!("version {}", w & 0xffff),
            Field::Format => format!("{w:#x} (not a descriptor of this library)"),
            Field::Precision => precision_from_code(w)
                .map_or_else(|| format!("unknown code {w}"), |p| p.name().to_string()),
            Field::Causal => match w {
                0 => "false".into(),
                1 => "true".into(),
                _ => format!("unknown code {w}"),
            },
            Field::Scale => match u32::try_from(w) {
                Ok(b) => format!("{} (bits {b:#010x})", f32::from_bits(b)),
                Err(_) => format!("unknown code {w:#x}"),
            },
            Field::Status => Status::from_code(w)
                .map_or_else(|| format!("unknown code {w}"), |s| s.describe().to_string()),
            _ => w.to_string(),
        }
    }
}

impl ProblemDesc {
    /// The descriptor as words (see [`Field`] for their order).
    pub fn encode(&self) -> [u64; WORDS] {
        [
            MAGIC,
            self.world_size as u64,
            self.rank as u64,
            self.batch as u64,
            self.chunk as u64,
            self.heads_q as u64,
            self.heads_kv as u64,
            self.dim as u64,
            precision_code(self.precision),
            self.causal as u64,
            self.scale_bits as u64,
            self.status.code(),
        ]
    }

    /// The descriptor from its words; `None` when a word is not one [`Self::encode`] writes.
    pub fn decode(w: &[u64; WORDS]) -> Option<ProblemDesc> {
        let size = |i: usize| usize::try_from(w[i]).ok();
        if w[0] != MAGIC {
            return None;
        }
        Some(ProblemDesc {
            world_size: size(1)?,
            rank: size(2)?,
            batch: size(3)?,
            chunk: size(4)?,
            heads_q: size(5)?,
            heads_kv: size(6)?,
            dim: size(7)?,
            precision: precision_from_code(w[8])?,
            causal: match w[9] {
                0 => false,
                1 => true,
                _ => return None,
            },
            scale_bits: u32::try_from(w[10]).ok()?,
            status: Status::from_code(w[11])?,
        })
    }
}

/// Why the ranks may not enter the ring: the same on every rank, since every rank derives it
/// from the same gathered words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disagreement {
    /// The gathered buffer does not hold one descriptor per rank.
    Count {
        /// Words gathered.
        words: usize,
        /// Ranks expected.
        ranks: usize,
    },
    /// Ranks differ in `field`: each distinct value (readable) with the ranks holding it, in
    /// order of first appearance.
    Differs {
        /// The first field (in word order) that differs.
        field: Field,
        /// Values and their ranks.
        groups: Vec<(String, Vec<usize>)>,
    },
    /// The descriptor in slot `slot` names rank `claims` (ranks of two communicators mixed).
    WrongSlot {
        /// Position in the gathered buffer (the communicator's rank).
        slot: usize,
        /// The rank it claims.
        claims: u64,
    },
    /// Ranks that agree on the problem but cannot run it, with their reason.
    NotReady {
        /// Rank and its status (readable).
        ranks: Vec<(usize, String)>,
    },
}

fn list(ranks: &[usize]) -> String {
    let n: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    format!(
        "{} {}",
        if ranks.len() == 1 { "rank" } else { "ranks" },
        n.join(", ")
    )
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Disagreement::Count { words, ranks } => write!(
                f,
                "the exchange gathered {words} words, not {WORDS} for each of {ranks} ranks"
            ),
            Disagreement::Differs { field, groups } => {
                write!(f, "the ranks differ in {}: ", field.name())?;
                let parts: Vec<String> = groups
                    .iter()
                    .map(|(v, r)| format!("{v} on {}", list(r)))
                    .collect();
                write!(f, "{}", parts.join("; "))?;
                match field {
                    Field::Format => write!(f, "; run one build of fp8-sdpa on every rank"),
                    Field::WorldSize => write!(f, "; build every rank's communicator alike"),
                    _ => write!(f, "; give every rank the same problem"),
                }
            }
            Disagreement::WrongSlot { slot, claims } => write!(
                f,
                "communicator rank {slot} says it is rank {claims}; every process needs its own \
                 rank of one communicator"
            ),
            Disagreement::NotReady { ranks } => {
                let parts: Vec<String> = ranks
                    .iter()
                    .map(|(r, why)| format!("rank {r}: {why}"))
                    .collect();
                write!(f, "{}", parts.join("; "))
            }
        }
    }
}

/// Compares the descriptors all-gathered from `ranks` ranks (`gathered[i * WORDS..]` is rank
/// i's). `Ok` only when every rank described the same problem and is ready; else the first
/// fault in this order: the format version, the world size, each slot's rank, the problem
/// fields in word order, the ranks' statuses.
pub fn compare(gathered: &[u64], ranks: usize) -> Result<(), Disagreement> {
    if ranks == 0 || gathered.len() != ranks * WORDS {
        return Err(Disagreement::Count {
            words: gathered.len(),
            ranks,
        });
    }
    let word = |r: usize, f: Field| gathered[r * WORDS + f.word()];
    let differs = |f: Field| -> Option<Disagreement> {
        let mut groups: Vec<(u64, Vec<usize>)> = Vec::new();
        for r in 0..ranks {
            let w = word(r, f);
            match groups.iter_mut().find(|(v, _)| *v == w) {
                Some((_, rs)) => rs.push(r),
                None => groups.push((w, vec![r])),
            }
        }
        (groups.len() > 1).then(|| Disagreement::Differs {
            field: f,
            groups: groups.into_iter().map(|(v, r)| (f.show(v), r)).collect(),
        })
    };
    if let Some(d) = differs(Field::Format) {
        return Err(d);
    }
    if word(0, Field::Format) != MAGIC {
        // Every slot holds the same foreign word: all ranks run one other build.
        return Err(Disagreement::Differs {
            field: Field::Format,
            groups: vec![(
                Field::Format.show(word(0, Field::Format)),
                (0..ranks).collect(),
            )],
        });
    }
    if let Some(d) = differs(Field::WorldSize) {
        return Err(d);
    }
    if word(0, Field::WorldSize) != ranks as u64 {
        return Err(Disagreement::Differs {
            field: Field::WorldSize,
            groups: vec![
                (word(0, Field::WorldSize).to_string(), (0..ranks).collect()),
                (format!("{ranks} in the communicator"), Vec::new()),
            ],
        });
    }
    for slot in 0..ranks {
        if word(slot, Field::Rank) != slot as u64 {
            return Err(Disagreement::WrongSlot {
                slot,
                claims: word(slot, Field::Rank),
            });
        }
    }
    for f in &Field::ALL[Field::Batch.word()..Field::Status.word()] {
        if let Some(d) = differs(*f) {
            return Err(d);
        }
    }
    let not_ready: Vec<(usize, String)> = (0..ranks)
        .filter(|&r| word(r, Field::Status) != Status::Ready.code())
        .map(|r| (r, Field::Status.show(word(r, Field::Status))))
        .collect();
    if !not_ready.is_empty() {
        return Err(Disagreement::NotReady { ranks: not_ready });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn desc(rank: usize, ranks: usize) -> ProblemDesc {
        ProblemDesc {
            world_size: ranks,
            rank,
            batch: 1,
            chunk: 4096,
            heads_q: 16,
            heads_kv: 8,
            dim: 128,
            precision: Precision::Bf16,
            causal: true,
            scale_bits: (1.0f32 / 128f32.sqrt()).to_bits(),
            status: Status::Ready,
        }
    }

    fn gather(d: &[ProblemDesc]) -> Vec<u64> {
        d.iter().flat_map(|d| d.encode()).collect()
    }

    #[test]
    fn equal_problems_agree() {
        for p in 1..=8 {
            let all: Vec<_> = (0..p).map(|r| desc(r, p)).collect();
            assert_eq!(compare(&gather(&all), p), Ok(()));
        }
    }

    #[test]
    fn a_different_chunk_names_the_field_and_the_ranks() {
        let mut all: Vec<_> = (0..3).map(|r| desc(r, 3)).collect();
        all[1].chunk = 2048;
        let e = compare(&gather(&all), 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the ranks differ in chunk (tokens per chunk): 4096 on ranks 0, 2; 2048 on rank 1; \
             give every rank the same problem"
        );
    }

    #[test]
    fn precision_and_scale_read_as_values() {
        let mut all: Vec<_> = (0..2).map(|r| desc(r, 2)).collect();
        all[0].precision = Precision::Fp8KvBf16;
        let e = compare(&gather(&all), 2).unwrap_err().to_string();
        assert!(e.contains("fp8kv_bf16 on rank 0; bf16 on rank 1"), "{e}");
        let mut all: Vec<_> = (0..2).map(|r| desc(r, 2)).collect();
        all[1].scale_bits = 0.5f32.to_bits();
        let e = compare(&gather(&all), 2).unwrap_err().to_string();
        assert!(e.contains("softmax scale: 0.088388"), "{e}");
        assert!(e.contains("0.5 (bits 0x3f000000) on rank 1"), "{e}");
    }

    #[test]
    fn a_rank_not_ready_stops_every_rank() {
        let mut all: Vec<_> = (0..4).map(|r| desc(r, 4)).collect();
        all[2].status = Status::NotLoaded;
        all[3].status = Status::BufferSize;
        let e = compare(&gather(&all), 4).unwrap_err();
        assert_eq!(
            e,
            Disagreement::NotReady {
                ranks: vec![
                    (2, Status::NotLoaded.describe().into()),
                    (3, Status::BufferSize.describe().into())
                ]
            }
        );
    }

    #[test]
    fn a_different_problem_is_named_before_a_status() {
        let mut all: Vec<_> = (0..2).map(|r| desc(r, 2)).collect();
        all[0].status = Status::BufferSize;
        all[1].dim = 64;
        let e = compare(&gather(&all), 2).unwrap_err().to_string();
        assert!(e.starts_with("the ranks differ in head dim: 128 on rank 0; 64 on rank 1"));
    }

    #[test]
    fn foreign_builds_world_sizes_and_slots_are_named() {
        let all: Vec<_> = (0..2).map(|r| desc(r, 2)).collect();
        let mut w = gather(&all);
        w[WORDS] = MAGIC + 1;
        let e = compare(&w, 2).unwrap_err().to_string();
        assert!(
            e.contains("version 1 on rank 0; version 2 on rank 1; run one build"),
            "{e}"
        );
        let w = vec![0u64; 2 * WORDS];
        let e = compare(&w, 2).unwrap_err().to_string();
        assert!(e.contains("not a descriptor of this library"), "{e}");
        let all: Vec<_> = (0..2).map(|r| desc(r, 3)).collect();
        let e = compare(&gather(&all), 2).unwrap_err().to_string();
        assert!(
            e.contains("world size: 3 on ranks 0, 1; 2 in the communicator"),
            "{e}"
        );
        let all = [desc(0, 2), desc(0, 2)];
        assert_eq!(
            compare(&gather(&all), 2),
            Err(Disagreement::WrongSlot { slot: 1, claims: 0 })
        );
        assert!(matches!(
            compare(&gather(&all)[1..], 2),
            Err(Disagreement::Count { .. })
        ));
    }

    fn any_desc() -> impl Strategy<Value = ProblemDesc> {
        (
            (1usize..64, 0usize..64, 1usize..1 << 20, 1usize..1 << 24),
            (1usize..256, 1usize..256, 1usize..1024),
            (0usize..Precision::ALL.len(), any::<bool>(), any::<u32>()),
            0usize..Status::ALL.len(),
        )
            .prop_map(
                |(
                    (world_size, rank, batch, chunk),
                    (heads_q, heads_kv, dim),
                    (p, causal, s),
                    st,
                )| {
                    ProblemDesc {
                        world_size,
                        rank,
                        batch,
                        chunk,
                        heads_q,
                        heads_kv,
                        dim,
                        precision: Precision::ALL[p],
                        causal,
                        scale_bits: s,
                        status: Status::ALL[st],
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn encode_decode_round_trips(d in any_desc()) {
            prop_assert_eq!(ProblemDesc::decode(&d.encode()), Some(d));
        }

        #[test]
        fn any_single_field_difference_is_detected(
            d in any_desc(),
            ranks in 2usize..9,
            pick in any::<prop::sample::Index>(),
            field in 0usize..WORDS,
            flip in 1u64..u64::MAX,
        ) {
            let base = ProblemDesc { world_size: ranks, status: Status::Ready, ..d };
            let mut w: Vec<u64> =
                (0..ranks).flat_map(|r| ProblemDesc { rank: r, ..base }.encode()).collect();
            prop_assert_eq!(compare(&w, ranks), Ok(()));
            let odd = pick.index(ranks);
            w[odd * WORDS + field] ^= flip;
            let e = compare(&w, ranks);
            prop_assert!(e.is_err(), "field {field} of rank {odd} changed unnoticed");
            match e.unwrap_err() {
                Disagreement::Differs { field: f, groups } => {
                    prop_assert_eq!(f, Field::ALL[field]);
                    prop_assert!(groups.iter().any(|(_, r)| r == &vec![odd]), "{groups:?}");
                }
                Disagreement::WrongSlot { slot, .. } => {
                    prop_assert_eq!(Field::ALL[field], Field::Rank);
                    prop_assert_eq!(slot, odd);
                }
                Disagreement::NotReady { ranks: r } => {
                    prop_assert_eq!(Field::ALL[field], Field::Status);
                    prop_assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![odd]);
                }
                Disagreement::Count { .. } => prop_assert!(false, "count cannot change"),
            }
        }
    }
}
