//! `sdpa-lab attn`: one forward pass on the user's tensors from a safetensors file.

use crate::attn_io;
use fp8_sdpa::runtime::{
    Attention, CallOptions, Descale, KernelChoice, TensorMut, TensorRef, VecMut, VecRef,
};
use fp8_sdpa::{AttnParams, Error, Layout, Precision, Variant};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `attn`.
#[derive(clap::Args)]
pub struct Args {
    /// Input file with tensors q, k, v (and q_descale, k_descale, v_descale for FP8 inputs).
    #[arg(long)]
    pub inputs: PathBuf,
    /// Output file: tensor o (and lse with --lse).
    #[arg(long)]
    pub out: PathBuf,
    /// Causal mask, aligned bottom-right (FlashAttention's convention).
    #[arg(long)]
    pub causal: bool,
    /// Softmax scale (default 1/sqrt(head_dim)).
    #[arg(long)]
    pub scale: Option<f32>,
    /// Memory order of the tensors in the file.
    #[arg(long, default_value = "bshd", value_parser = parse_layout)]
    pub layout: Layout,
    /// Kernel variant: a key (`portable.m128.n32.w4.s2.b2.ctelx`) or the Variant as JSON
    /// (default: the shipped default for the problem).
    #[arg(long)]
    pub variant: Option<String>,
    /// Also write the per-row log-sum-exp as `lse`.
    #[arg(long)]
    pub lse: bool,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

fn parse_layout(s: &str) -> Result<Layout, String> {
    match s {
        "bshd" => Ok(Layout::Bshd),
        "bhsd" => Ok(Layout::Bhsd),
        _ => Err(format!("unknown layout '{s}': expected bshd or bhsd")),
    }
}

/// A variant from its key or its JSON form.
pub fn parse_variant(s: &str) -> fp8_sdpa::Result<Variant> {
    if s.trim_start().starts_with('{') {
        let v: Variant = serde_json::from_str(s)
            .map_err(|e| Error::InvalidInput(format!("--variant JSON: {e}")))?;
        v.validate()?;
        Ok(v)
    } else {
        s.parse()
    }
}

/// Runs the command.
pub fn run(a: Args) -> fp8_sdpa::Result<ExitCode> {
    let bytes = std::fs::read(&a.inputs).map_err(Error::io(&a.inputs))?;
    let file = attn_io::parse(&bytes, a.layout)
        .map_err(|e| Error::InvalidInput(format!("{}: {e}", a.inputs.display())))?;
    let kernel = match &a.variant {
        Some(k) => KernelChoice::Variant(parse_variant(k)?),
        None => KernelChoice::Auto,
    };
    let dev = crate::cmd::env::open_device(a.device)
        .map_err(|e| Error::Unsupported(format!("attn needs a GPU: {e}")))?;
    let stream = dev.new_stream()?;
    let [q, k, v] = &file.qkv;
    let precision = Precision::from_types(q.dtype, k.dtype).ok_or_else(|| {
        Error::InvalidInput(format!(
            "no precision path takes q {} with k {}",
            q.dtype, k.dtype
        ))
    })?;
    let up = |t: &attn_io::FileTensor| {
        stream
            .clone_htod(&t.bytes)
            .map_err(Error::driver("uploading inputs"))
    };
    let (dq, dk, dv) = (up(q)?, up(k)?, up(v)?);
    let dds: Vec<Option<cudarc::driver::CudaSlice<f32>>> = file
        .descales
        .iter()
        .map(|d| {
            d.as_ref()
                .map(|d| {
                    stream
                        .clone_htod(&d.values)
                        .map_err(Error::driver("uploading descales"))
                })
                .transpose()
        })
        .collect::<fp8_sdpa::Result<_>>()?;
    let o_t = precision.out();
    let mut o = stream
        .alloc_zeros::<u8>(q.shape.iter().product::<usize>() * o_t.size())
        .map_err(Error::driver("allocating O"))?;
    let [b, sq, hq, d] = q.shape;
    let mut lse = stream
        .alloc_zeros::<f32>(b * hq * sq)
        .map_err(Error::driver("allocating LSE"))?;
    let params = AttnParams {
        scale: a.scale.unwrap_or(1.0 / (d as f32).sqrt()),
        causal: a.causal,
    };
    let launched = {
        let st: &cudarc::driver::CudaStream = &stream;
        let ds = |i: usize| {
            dds[i].as_ref().map(|s| Descale {
                values: VecRef::new(s, st),
                batch_stride: file.descales[i].as_ref().map_or(0, |d| d.batch_stride),
            })
        };
        let call = Attention {
            q: TensorRef::contiguous(&dq, st, q.dtype, q.shape, a.layout)?,
            k: TensorRef::contiguous(&dk, st, k.dtype, k.shape, a.layout)?,
            v: TensorRef::contiguous(&dv, st, v.dtype, v.shape, a.layout)?,
            o: TensorMut::contiguous(&mut o, st, o_t, q.shape, a.layout)?,
            lse: if a.lse {
                Some(VecMut::new(&mut lse, st))
            } else {
                None
            },
            q_descale: ds(0),
            k_descale: ds(1),
            v_descale: ds(2),
            params,
        };
        dev.attention(
            &stream,
            &call,
            CallOptions {
                kernel,
                check_descales: true,
            },
        )?
    };
    stream
        .synchronize()
        .map_err(Error::driver("running attention"))?;
    let o_host = stream.clone_dtoh(&o).map_err(Error::driver("reading O"))?;
    let lse_host = stream
        .clone_dtoh(&lse)
        .map_err(Error::driver("reading LSE"))?;
    let out = attn_io::write(
        &o_host,
        o_t,
        q.shape,
        a.layout,
        a.lse.then_some(&lse_host[..]),
    )
    .map_err(Error::InvalidInput)?;
    std::fs::write(&a.out, out).map_err(Error::io(&a.out))?;
    eprintln!(
        "{} [{b}, {sq}, {hq}, {d}] with {} -> {}",
        precision,
        launched.spec.key(),
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_variant;

    #[test]
    fn variant_from_key_or_json() {
        let key = "portable.m128.n32.w4.s2.b2.ctelx";
        let v = parse_variant(key).unwrap();
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(parse_variant(&json).unwrap(), v);
        assert!(parse_variant("{\"family\": \"portable\"}")
            .unwrap_err()
            .to_string()
            .contains("--variant JSON"));
        let mut bad = v;
        bad.warps = 0;
        assert!(
            parse_variant(&serde_json::to_string(&bad).unwrap()).is_err(),
            "validity rules apply to JSON too"
        );
    }
}
