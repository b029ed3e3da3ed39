//! This crate's own CUDA source: E4M3 encode and decode with given descales (`gpu/codec.cu`,
//! used by `gpu/codec.rs`), compiled at run time with NVRTC through fp8-sdpa like its
//! kernels. Outside the `cuda` feature so that CI, which has NVRTC but no nvcc, compiles it.

use fp8_sdpa::kernels::KernelSource;

/// The codec source; `IN_T` (half_t, bf16_t or float) is the quantizer's input type.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) const CODEC: KernelSource = KernelSource {
    name: "fp8_sdpa_candle_codec.cu",
    text: include_str!("gpu/codec.cu"),
    entry: "quantize_e4m3_with",
};

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_sdpa::compile::Compiler;
    use fp8_sdpa::Arch;

    #[test]
    fn the_codec_compiles_for_every_input_type_and_arch_without_spills() {
        let compiler = Compiler::with_cache(None);
        for arch in [Arch::Sm80, Arch::Sm90a] {
            for in_t in ["half_t", "bf16_t", "float"] {
                let m = compiler
                    .compile_source_ungated(&CODEC, &[("IN_T".into(), in_t.into())], arch)
                    .unwrap_or_else(|e| panic!("{arch:?} {in_t}: {e}"));
                let mut names: Vec<_> = m.resources.iter().map(|r| r.function.as_str()).collect();
                names.sort();
                assert_eq!(
                    names,
                    ["dequantize_e4m3", "quantize_e4m3_with"],
                    "{arch:?} {in_t}"
                );
                for r in &m.resources {
                    assert_eq!(
                        (r.spill_stores, r.stack_frame),
                        (0, 0),
                        "{arch:?} {in_t}: {r:?}"
                    );
                }
            }
        }
    }
}
