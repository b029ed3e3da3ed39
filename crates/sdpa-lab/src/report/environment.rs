//! The environment manifest as a reader wants it: values, not serde's wrappers.
//!
//! [`crate::manifest::Manifest`] serializes its `Result` fields as `{"Ok": value}` or
//! `{"Err": reason}` and the GPU as the library's `DeviceInfo` object. This module turns that
//! into labelled lines (`GPU: NVIDIA H100 80GB HBM3 (sm_90a, 132 SMs, driver 13000)`,
//! `NVRTC: 13.0 (libnvrtc.so.13)`, errors as `unavailable: <reason>`). Keys it does not know
//! (older or hand-made manifests) are shown under their own names, flattened to dotted keys,
//! with any `Ok`/`Err` wrapper removed the same way.

use serde_json::{Map, Value};

/// Keys shown with their own label and formatting, in display order.
const KNOWN: [&str; 10] = [
    "gpu",
    "nvrtc",
    "torch",
    "git_sha",
    "git_dirty",
    "version",
    "host",
    "os",
    "cpus",
    "taken_at",
];

/// `{"Ok": v}` → `Ok(v)`, `{"Err": e}` → `Err(e as text)`, anything else → `Ok(itself)`.
pub fn unwrap_result(v: &Value) -> Result<&Value, String> {
    if let Value::Object(m) = v {
        if m.len() == 1 {
            if let Some(ok) = m.get("Ok") {
                return Ok(ok);
            }
            if let Some(err) = m.get("Err") {
                return Err(match err {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                });
            }
        }
    }
    Ok(v)
}

/// `unavailable: <reason>` for an `Err`, the formatted value for an `Ok`.
fn result_text(v: &Value, fmt: impl Fn(&Value) -> String) -> String {
    match unwrap_result(v) {
        Ok(x) => fmt(x),
        Err(e) => format!("unavailable: {}", one_line(&e)),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => one_line(s),
        Value::Null => "–".into(),
        other => other.to_string(),
    }
}

/// `"Sm90a"` (serde's name of the library's `Arch`) → `sm_90a`; other text unchanged.
pub fn arch_name(v: &Value) -> Option<String> {
    if let Ok(a) = serde_json::from_value::<fp8_sdpa::Arch>(v.clone()) {
        return Some(a.name().to_string());
    }
    let s = v.as_str()?;
    match s.strip_prefix("Sm") {
        Some(rest) => Some(format!("sm_{rest}")),
        None => Some(s.to_string()),
    }
}

/// The GPU's arch (`sm_90a`) from a manifest: top-level `arch`, else the GPU's.
pub fn arch(m: &Value) -> Option<String> {
    if let Some(a) = m.get("arch").and_then(arch_name) {
        return Some(a);
    }
    let gpu = unwrap_result(m.get("gpu")?).ok()?;
    gpu.get("arch").and_then(arch_name)
}

/// The GPU's name from a manifest (`gpu.Ok.name`, or a top-level `device`).
pub fn gpu_name(m: &Value) -> Option<String> {
    if let Some(g) = m.get("gpu") {
        if let Ok(g) = unwrap_result(g) {
            if let Some(n) = g.get("name").and_then(Value::as_str) {
                return Some(n.to_string());
            }
        }
    }
    m.get("device").and_then(Value::as_str).map(str::to_string)
}

/// One line for the GPU: `NAME (sm_90a, 132 SMs, driver 13000)`.
fn gpu_line(g: &Value) -> String {
    let Some(obj) = g.as_object() else {
        return text(g);
    };
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("unnamed GPU");
    let mut parts: Vec<String> = Vec::new();
    if let Some(a) = obj.get("arch").and_then(arch_name) {
        parts.push(a);
    }
    if let Some(n) = obj.get("sm_count").and_then(Value::as_u64) {
        parts.push(format!("{n} SMs"));
    }
    if let Some(d) = obj.get("driver_version").and_then(Value::as_i64) {
        parts.push(format!("driver {d}"));
    }
    if parts.is_empty() {
        name.to_string()
    } else {
        format!("{name} ({})", parts.join(", "))
    }
}

/// The GPU's other figures: memory, L2, clocks, bus width, ordinal.
fn gpu_details(g: &Value) -> Option<String> {
    let obj = g.as_object()?;
    let u = |k: &str| obj.get(k).and_then(Value::as_u64);
    let mut parts: Vec<String> = Vec::new();
    if let Some(b) = u("total_mem") {
        parts.push(format!("{:.1} GiB memory", b as f64 / (1u64 << 30) as f64));
    }
    if let Some(b) = u("l2_bytes") {
        parts.push(format!("{:.0} MiB L2", b as f64 / (1u64 << 20) as f64));
    }
    if let Some(b) = u("smem_optin") {
        parts.push(format!("{:.0} KiB smem per block", b as f64 / 1024.0));
    }
    if let Some(k) = u("sm_clock_khz") {
        parts.push(format!("SM clock {} MHz", k / 1000));
    }
    if let Some(k) = u("mem_clock_khz") {
        parts.push(format!("memory clock {} MHz", k / 1000));
    }
    if let Some(b) = u("mem_bus_bits") {
        parts.push(format!("{b}-bit bus"));
    }
    if let Some(o) = u("ordinal") {
        parts.push(format!("device {o}"));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// `2.11.0+cu130 cuda 13.0 cudnn 91900 gpu True` (what the manifest's Python one-liner prints)
/// → `2.11.0+cu130 (CUDA 13.0, cuDNN 91900, GPU available)`; other text unchanged.
fn torch_line(v: &Value) -> String {
    let Some(s) = v.as_str() else {
        return text(v);
    };
    let words: Vec<&str> = s.split_whitespace().collect();
    if words.len() != 7 || words[1] != "cuda" || words[3] != "cudnn" || words[5] != "gpu" {
        return one_line(s);
    }
    let gpu = match words[6] {
        "True" => "GPU available",
        "False" => "no GPU visible to PyTorch",
        _ => "GPU unknown",
    };
    format!(
        "{} (CUDA {}, cuDNN {}, {gpu})",
        words[0], words[2], words[4]
    )
}

/// Labelled lines for a manifest, known fields first. A manifest that is not an object is
/// one line, `manifest`.
pub fn rows(m: &Value) -> Vec<(String, String)> {
    let Value::Object(map) = m else {
        return vec![("manifest".into(), text(m))];
    };
    let mut out: Vec<(String, String)> = Vec::new();
    if let Some(g) = map.get("gpu") {
        out.push(("GPU".into(), result_text(g, gpu_line)));
        if let Ok(g) = unwrap_result(g) {
            if let Some(d) = gpu_details(g) {
                out.push(("GPU details".into(), d));
            }
        }
    }
    if let Some(v) = map.get("nvrtc") {
        out.push(("NVRTC".into(), result_text(v, text)));
    }
    if let Some(v) = map.get("torch") {
        out.push(("PyTorch".into(), result_text(v, torch_line)));
    }
    if let Some(sha) = map.get("git_sha") {
        let state = match map.get("git_dirty").and_then(Value::as_bool) {
            Some(true) => " (uncommitted changes)",
            Some(false) => " (clean)",
            None => "",
        };
        let sha = match sha {
            Value::Null => "not a git checkout".to_string(),
            other => text(other),
        };
        out.push(("Git commit".into(), format!("{sha}{state}")));
    }
    if let Some(v) = map.get("version") {
        out.push(("fp8-sdpa version".into(), text(v)));
    }
    if let Some(h) = map.get("host") {
        let mut extra: Vec<String> = Vec::new();
        if let Some(os) = map.get("os").and_then(Value::as_str) {
            extra.push(os.to_string());
        }
        if let Some(n) = map.get("cpus").and_then(Value::as_u64) {
            extra.push(format!("{n} CPUs"));
        }
        let line = if extra.is_empty() {
            text(h)
        } else {
            format!("{} ({})", text(h), extra.join(", "))
        };
        out.push(("Host".into(), line));
    } else {
        // No host: show os and cpus on their own.
        for k in ["os", "cpus"] {
            if let Some(v) = map.get(k) {
                out.push((k.into(), text(v)));
            }
        }
    }
    if let Some(v) = map.get("taken_at") {
        out.push(("Taken at".into(), text(v)));
    }
    let rest: Map<String, Value> = map
        .iter()
        .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    flatten("", &Value::Object(rest), 0, &mut out);
    out
}

/// Flattens objects to dotted keys (two levels), unwrapping `Ok`/`Err`; arrays and deeper
/// values become compact JSON, cut at 120 characters.
fn flatten(prefix: &str, v: &Value, depth: usize, out: &mut Vec<(String, String)>) {
    let v = match unwrap_result(v) {
        Ok(v) => v,
        Err(e) => {
            out.push((prefix.to_string(), format!("unavailable: {}", one_line(&e))));
            return;
        }
    };
    match v {
        Value::Object(m) if depth < 2 => {
            for (k, x) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, depth + 1, out);
            }
        }
        other => {
            let s = text(other);
            let s = if s.chars().count() > 120 {
                format!("{}…", s.chars().take(117).collect::<String>())
            } else {
                s
            };
            out.push((prefix.to_string(), s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The shape `sdpa-lab env` writes (docs/results/*/manifest.json).
    fn real() -> Value {
        json!({
            "cpus": 16,
            "git_dirty": false,
            "git_sha": "b6925e57561f98c469603d94ae9b866ed211ed5d",
            "gpu": {"Ok": {
                "arch": "Sm90a", "compute_capability": [9, 0], "driver_version": 13000,
                "l2_bytes": 52428800, "mem_bus_bits": 5120, "mem_clock_khz": 2619000,
                "name": "NVIDIA H100 80GB HBM3", "ordinal": 0, "sm_clock_khz": 1980000,
                "sm_count": 132, "smem_optin": 232448, "total_mem": 85017493504u64
            }},
            "host": "vm",
            "nvrtc": {"Ok": "13.0 (libnvrtc.so.13)"},
            "os": "linux x86_64",
            "taken_at": "2026-11-23T14:30:14Z",
            "torch": {"Ok": "2.11.0+cu130 cuda 13.0 cudnn 91900 gpu True"},
            "version": "0.1.0"
        })
    }

    fn get<'a>(rows: &'a [(String, String)], k: &str) -> &'a str {
        rows.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {k} in {rows:?}"))
    }

    #[test]
    fn real_manifest_reads_as_values() {
        let r = rows(&real());
        assert_eq!(
            get(&r, "GPU"),
            "NVIDIA H100 80GB HBM3 (sm_90a, 132 SMs, driver 13000)"
        );
        assert!(get(&r, "GPU details").starts_with("79.2 GiB memory, 50 MiB L2, 227 KiB"));
        assert_eq!(get(&r, "NVRTC"), "13.0 (libnvrtc.so.13)");
        assert_eq!(
            get(&r, "PyTorch"),
            "2.11.0+cu130 (CUDA 13.0, cuDNN 91900, GPU available)"
        );
        assert_eq!(
            get(&r, "Git commit"),
            "b6925e57561f98c469603d94ae9b866ed211ed5d (clean)"
        );
        assert_eq!(get(&r, "Host"), "vm (linux x86_64, 16 CPUs)");
        assert_eq!(r[0].0, "GPU");
        for (k, v) in &r {
            assert!(!k.contains("Ok") && !k.contains("Err"), "{k}");
            assert!(!v.starts_with('{'), "{k}: {v}");
        }
        assert_eq!(arch(&real()).as_deref(), Some("sm_90a"));
        assert_eq!(gpu_name(&real()).as_deref(), Some("NVIDIA H100 80GB HBM3"));
    }

    #[test]
    fn errors_read_unavailable() {
        let m = json!({
            "gpu": {"Err": "no GPU: the CUDA driver reports no device"},
            "nvrtc": {"Err": "libnvrtc not found\n(searched 3 places)"},
            "torch": {"Err": "python3 cannot import torch: ModuleNotFoundError"},
            "git_sha": null,
            "git_dirty": null
        });
        let r = rows(&m);
        assert_eq!(
            get(&r, "GPU"),
            "unavailable: no GPU: the CUDA driver reports no device"
        );
        assert_eq!(
            get(&r, "NVRTC"),
            "unavailable: libnvrtc not found (searched 3 places)"
        );
        assert!(get(&r, "PyTorch").starts_with("unavailable: python3 cannot import"));
        assert_eq!(get(&r, "Git commit"), "not a git checkout");
        assert!(r.iter().all(|(k, _)| k != "GPU details"));
        assert_eq!(arch(&m), None);
    }

    #[test]
    fn unknown_keys_flatten_without_wrappers() {
        let m = json!({
            "device": "NVIDIA H100 80GB HBM3",
            "arch": "sm_90a",
            "clocks": {"sm_mhz": 1980},
            "extra": {"Ok": {"a": 1}},
            "bad": {"Err": "nope"},
            "torch": "2.5.0 cuda 12.4 cudnn 90100 gpu False"
        });
        let r = rows(&m);
        assert_eq!(get(&r, "device"), "NVIDIA H100 80GB HBM3");
        assert_eq!(get(&r, "arch"), "sm_90a");
        assert_eq!(get(&r, "clocks.sm_mhz"), "1980");
        assert_eq!(get(&r, "extra.a"), "1");
        assert_eq!(get(&r, "bad"), "unavailable: nope");
        assert_eq!(
            get(&r, "PyTorch"),
            "2.5.0 (CUDA 12.4, cuDNN 90100, no GPU visible to PyTorch)"
        );
        assert_eq!(arch(&m).as_deref(), Some("sm_90a"));
        assert_eq!(gpu_name(&m).as_deref(), Some("NVIDIA H100 80GB HBM3"));
    }
}
