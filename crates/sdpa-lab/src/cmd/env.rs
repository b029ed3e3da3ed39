//! `sdpa-lab env`: the environment manifest, printed and written as JSON.

use crate::manifest::Manifest;
use fp8_sdpa::runtime::Device;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `env`.
#[derive(clap::Args)]
pub struct Args {
    /// Write the manifest here.
    #[arg(long, default_value = "manifest.json")]
    pub out: PathBuf,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

/// Opens the GPU if there is one, else says why not.
pub fn open_device(ordinal: usize) -> Result<Device, String> {
    if Device::count() == 0 {
        return Err(match fp8_sdpa::libs::ensure_driver() {
            Err(e) => format!("no GPU: {e}"),
            Ok(_) => "no GPU: the CUDA driver reports no device".into(),
        });
    }
    Device::open(ordinal).map_err(|e| e.to_string())
}

/// Runs the command.
pub fn run(a: Args) -> fp8_sdpa::Result<ExitCode> {
    let dev = open_device(a.device);
    let m = Manifest::take(dev.as_ref().map_err(|e| e.clone()));
    let text = serde_json::to_string_pretty(&m).expect("manifest serializes");
    println!("{text}");
    std::fs::write(&a.out, &text).map_err(fp8_sdpa::Error::io(&a.out))?;
    eprintln!("wrote {}", a.out.display());
    Ok(ExitCode::SUCCESS)
}
