//! On-disk CUBIN cache. One file per key; written to a temporary file in the same folder and
//! renamed into place, so two processes filling the same entry never expose a torn file.
//! Each entry carries a SHA-256 of its contents: a corrupt entry is detected, removed and
//! rebuilt, never loaded.

use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Environment variable overriding the cache folder.
pub const CACHE_ENV: &str = "SDPA_CACHE_DIR";
const MAGIC: &[u8; 8] = b"SDPACK01";

/// A cache folder.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

/// Result of a lookup.
#[derive(Debug)]
pub enum Lookup {
    /// A valid entry: (metadata JSON, CUBIN).
    Hit(String, Vec<u8>),
    /// No entry.
    Miss,
    /// An entry existed but failed its check; it was removed. The reason says why.
    Corrupt(String),
}

impl Cache {
    /// The cache at `$SDPA_CACHE_DIR`, else `<user cache dir>/fp8-sdpa/kernels`.
    pub fn default_location() -> Result<Cache> {
        let dir = match std::env::var_os(CACHE_ENV) {
            Some(d) => PathBuf::from(d),
            None => dirs::cache_dir()
                .unwrap_or_else(std::env::temp_dir)
                .join("fp8-sdpa")
                .join("kernels"),
        };
        Cache::at(dir)
    }

    /// A cache in `dir` (created if missing).
    pub fn at(dir: impl Into<PathBuf>) -> Result<Cache> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| Error::Cache {
            path: dir.clone(),
            reason: format!("cannot create: {e}"),
        })?;
        Ok(Cache { dir })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.cubin"))
    }

    /// Looks up `key` (a hex digest).
    pub fn get(&self, key: &str) -> Lookup {
        let path = self.path(key);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(_) => return Lookup::Miss,
        };
        match decode(&bytes) {
            Ok((meta, cubin)) => Lookup::Hit(meta, cubin),
            Err(reason) => {
                let _ = std::fs::remove_file(&path);
                Lookup::Corrupt(reason)
            }
        }
    }

    /// Stores an entry atomically (temp file + rename).
    pub fn put(&self, key: &str, meta: &str, cubin: &[u8]) -> Result<()> {
        let path = self.path(key);
        let err = |e: std::io::Error| Error::Cache {
            path: path.clone(),
            reason: format!("cannot write: {e}"),
        };
        let mut tmp = tempfile_in(&self.dir).map_err(err)?;
        tmp.1.write_all(&encode(meta, cubin)).map_err(err)?;
        tmp.1.sync_all().map_err(err)?;
        drop(tmp.1);
        std::fs::rename(&tmp.0, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp.0);
            err(e)
        })
    }
}

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            ".tmp.{}.{}.{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            nanos
        );
        let p = dir.join(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
        {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Layout: MAGIC, sha256(rest), u32 LE meta length, meta, cubin.
fn encode(meta: &str, cubin: &[u8]) -> Vec<u8> {
    let mut rest = Vec::with_capacity(4 + meta.len() + cubin.len());
    rest.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    rest.extend_from_slice(meta.as_bytes());
    rest.extend_from_slice(cubin);
    let mut out = Vec::with_capacity(8 + 32 + rest.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&Sha256::digest(&rest));
    out.extend_from_slice(&rest);
    out
}

fn decode(bytes: &[u8]) -> std::result::Result<(String, Vec<u8>), String> {
    if bytes.len() < 8 + 32 + 4 || &bytes[..8] != MAGIC {
        return Err("bad header".into());
    }
    let rest = &bytes[40..];
    if Sha256::digest(rest).as_slice() != &bytes[8..40] {
        return Err("checksum mismatch".into());
    }
    let n = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    if rest.len() < 4 + n {
        return Err("truncated metadata".into());
    }
    let meta = String::from_utf8(rest[4..4 + n].to_vec())
        .map_err(|_| "metadata is not UTF-8".to_string())?;
    Ok((meta, rest[4 + n..].to_vec()))
}

/// Hex SHA-256 of the given parts, each length-prefixed so that boundaries count.
pub fn digest(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_miss() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache::at(d.path()).unwrap();
        assert!(matches!(c.get("abc"), Lookup::Miss));
        c.put("abc", "{\"x\":1}", b"\x7fELF...").unwrap();
        match c.get("abc") {
            Lookup::Hit(m, b) => {
                assert_eq!(m, "{\"x\":1}");
                assert_eq!(b, b"\x7fELF...");
            }
            other => panic!("expected hit, got {other:?}"),
        }
    }

    #[test]
    fn corrupt_entry_is_detected_and_removed() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache::at(d.path()).unwrap();
        c.put("k", "meta", b"cubin-bytes").unwrap();
        let p = d.path().join("k.cubin");
        let mut bytes = std::fs::read(&p).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        match c.get("k") {
            Lookup::Corrupt(r) => assert!(r.contains("checksum"), "{r}"),
            other => panic!("expected corrupt, got {other:?}"),
        }
        assert!(!p.exists(), "corrupt entry must be removed");
        std::fs::write(&p, b"garbage").unwrap();
        assert!(matches!(c.get("k"), Lookup::Corrupt(_)));
    }

    #[test]
    fn concurrent_fill_never_tears() {
        let d = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::thread::scope(|s| {
            for t in 0..8 {
                let big = &big;
                let dir = d.path().to_path_buf();
                s.spawn(move || {
                    let c = Cache::at(dir).unwrap();
                    for _ in 0..20 {
                        c.put("same", &format!("writer {t}"), big).unwrap();
                        match c.get("same") {
                            Lookup::Hit(_, b) => assert_eq!(&b, big),
                            other => panic!("torn or missing entry: {other:?}"),
                        }
                    }
                });
            }
        });
        let leftovers: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "temp files left behind");
    }

    #[test]
    fn digest_separates_boundaries() {
        assert_ne!(digest(&[b"ab", b"c"]), digest(&[b"a", b"bc"]));
        assert_eq!(digest(&[b"x"]).len(), 64);
    }
}
