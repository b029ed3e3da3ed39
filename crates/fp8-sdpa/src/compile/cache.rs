//! On-disk CUBIN cache. One file per key, written to a temporary file in the same folder and
//! renamed into place, so two processes filling the same entry never expose a torn file.
//!
//! An entry is bound to the key it was stored under: its header holds a magic, the format
//! version, the key and the lengths, and a SHA-256 over all of that and the payload closes
//! it. An entry that fails any check (another key's entry copied in, truncated, extended,
//! flipped bits, an older format, a FIFO or device at the path) is never loaded: it is
//! removed and rebuilt. The SHA-256 is no secret: whoever can write the folder can write a
//! valid entry, so the folder is created owner-only and a world-writable one is not used.
//!
//! The cache only saves time: when no folder can be used, or an entry cannot be written,
//! kernels are compiled in memory and the call goes on (one warning per process).

use crate::compile::bounded::{read_regular, ReadFailure};
use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Environment variable overriding the cache folder.
pub const CACHE_ENV: &str = "SDPA_CACHE_DIR";
/// First bytes of an entry.
const MAGIC: &[u8; 8] = b"SDPACUBN";
/// Bumped when the entry layout changes (1 was the unkeyed `SDPACK01` layout).
const FORMAT_VERSION: u32 = 2;
/// Magic, version, key length, metadata length (u32 each but the magic), CUBIN length (u64).
const HEADER: usize = 8 + 4 + 4 + 4 + 8;
const DIGEST: usize = 32;
/// Longest key accepted (keys are 64 hex digits).
const MAX_KEY: usize = 128;
/// Largest entry read back; CUBINs are a few MiB at most.
const MAX_ENTRY: u64 = 256 << 20;

/// A cache folder.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

/// Result of a lookup.
#[derive(Debug)]
pub enum Lookup {
    /// A valid entry for the key: (metadata JSON, CUBIN).
    Hit(String, Vec<u8>),
    /// No entry.
    Miss,
    /// An entry existed but failed its check; it was removed. The reason says why.
    Corrupt(String),
}

/// Prints `msg` to stderr if no cache warning was printed yet in this process: a cache that
/// cannot be used slows every compile, but says so once.
pub(crate) fn warn_once(msg: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!("warning: {msg}");
    }
}

/// Where the cache lives, given `$SDPA_CACHE_DIR` (`env`) and the user's cache folder
/// (`user_cache`, `dirs::cache_dir()`): `env` if set and not empty, else
/// `<user_cache>/fp8-sdpa/kernels`, else `None` (no disk cache; never a shared folder such as
/// `/tmp`, where another user could plant entries).
pub fn resolve_dir(env: Option<OsString>, user_cache: Option<PathBuf>) -> Option<PathBuf> {
    match env {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => user_cache.map(|c| c.join("fp8-sdpa").join("kernels")),
    }
}

impl Cache {
    /// The folder the default cache uses: `$SDPA_CACHE_DIR`, else
    /// `<user cache dir>/fp8-sdpa/kernels` (`~/.cache/fp8-sdpa/kernels` on Linux), else
    /// `None`. See [`resolve_dir`].
    pub fn default_dir() -> Option<PathBuf> {
        resolve_dir(std::env::var_os(CACHE_ENV), dirs::cache_dir())
    }

    /// The cache at [`Cache::default_dir`], or `None` (compile in memory) when there is no
    /// such folder or it cannot be used; the latter warns once.
    pub fn default_location() -> Option<Cache> {
        match Self::default_dir() {
            Some(dir) => Self::usable(dir),
            None => {
                warn_once(&format!(
                    "no user cache folder (HOME unset?): compiled kernels are not cached; \
                     set {CACHE_ENV} to a folder only you can write to cache them"
                ));
                None
            }
        }
    }

    /// [`Cache::at`], or `None` with one warning when the folder cannot be used.
    pub fn usable(dir: impl Into<PathBuf>) -> Option<Cache> {
        match Self::at(dir) {
            Ok(c) => Some(c),
            Err(e) => {
                warn_once(&format!(
                    "{e}; compiled kernels are not cached (set {CACHE_ENV} to a folder only you can write)"
                ));
                None
            }
        }
    }

    /// A cache in `dir`, created (owner-only) if missing. A folder that cannot be created,
    /// is not a folder, or that every user may write is an [`Error::Cache`].
    pub fn at(dir: impl Into<PathBuf>) -> Result<Cache> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let dir = dir.into();
        let fail = |reason: String| Error::Cache {
            path: dir.clone(),
            reason,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| fail(format!("cannot create: {e}")))?;
        let meta = std::fs::metadata(&dir).map_err(|e| fail(format!("cannot read: {e}")))?;
        if !meta.is_dir() {
            return Err(fail("is not a folder".into()));
        }
        if meta.permissions().mode() & 0o002 != 0 {
            return Err(fail(
                "every user may write this folder, so anyone could plant entries; use one only you can write".into(),
            ));
        }
        Ok(Cache { dir })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.cubin"))
    }

    /// Looks up `key` (a hex digest). Only an entry stored under exactly this key is a hit.
    pub fn get(&self, key: &str) -> Lookup {
        if !valid_key(key) {
            return Lookup::Miss;
        }
        let path = self.path(key);
        let bytes = match read_regular(&path, MAX_ENTRY) {
            Ok(b) => b,
            Err(ReadFailure::Io(_)) => return Lookup::Miss,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Lookup::Corrupt(format!("the entry {e}"));
            }
        };
        match decode_entry(&bytes, key) {
            Ok((meta, cubin)) => Lookup::Hit(meta.to_string(), cubin.to_vec()),
            Err(reason) => {
                let _ = std::fs::remove_file(&path);
                Lookup::Corrupt(reason)
            }
        }
    }

    /// Stores an entry atomically (temp file + rename).
    pub fn put(&self, key: &str, meta: &str, cubin: &[u8]) -> Result<()> {
        let path = self.path(key);
        let fail = |reason: String| Error::Cache {
            path: path.clone(),
            reason,
        };
        if !valid_key(key) {
            return Err(fail(format!(
                "key '{key}' is not 1 to {MAX_KEY} characters of [0-9A-Za-z_-]"
            )));
        }
        let bytes = encode_entry(key, meta, cubin).ok_or_else(|| {
            fail(format!(
                "metadata of {} bytes exceeds the format's 4 GiB",
                meta.len()
            ))
        })?;
        let err = |e: std::io::Error| fail(format!("cannot write: {e}"));
        let mut tmp = tempfile_in(&self.dir).map_err(err)?;
        let written = tmp.1.write_all(&bytes).and_then(|()| tmp.1.sync_all());
        drop(tmp.1);
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp.0);
            return Err(err(e));
        }
        std::fs::rename(&tmp.0, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp.0);
            err(e)
        })
    }
}

/// A key names a file in the folder: nothing that could leave it or hide.
fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
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
            .mode(0o600)
            .open(&p)
        {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// An entry for `key` holding `meta` and `cubin`, as [`decode_entry`] reads it; `None` when a
/// length does not fit the format. Layout: MAGIC, u32 LE format version, u32 LE key length,
/// u32 LE metadata length, u64 LE CUBIN length, key, metadata, CUBIN, then SHA-256 of
/// everything before it.
#[doc(hidden)]
pub fn encode_entry(key: &str, meta: &str, cubin: &[u8]) -> Option<Vec<u8>> {
    let key_len = u32::try_from(key.len()).ok()?;
    let meta_len = u32::try_from(meta.len()).ok()?;
    let mut out = Vec::with_capacity(HEADER + key.len() + meta.len() + cubin.len() + DIGEST);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&key_len.to_le_bytes());
    out.extend_from_slice(&meta_len.to_le_bytes());
    out.extend_from_slice(&(cubin.len() as u64).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(meta.as_bytes());
    out.extend_from_slice(cubin);
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);
    Some(out)
}

/// Reads an entry's bytes as stored under `key`: the (metadata, CUBIN) it holds, or why it is
/// not a valid entry for `key` (bad magic or version, lengths that disagree with the size,
/// a checksum mismatch, another key, metadata that is not UTF-8). Pure and total: any bytes
/// give a value, never a panic (the fuzz target's entry point).
#[doc(hidden)]
pub fn decode_entry<'a>(
    bytes: &'a [u8],
    key: &str,
) -> std::result::Result<(&'a str, &'a [u8]), String> {
    let (header, _) = bytes
        .split_first_chunk::<HEADER>()
        .ok_or_else(|| format!("truncated: {} bytes, shorter than the header", bytes.len()))?;
    let (magic, rest) = header.split_at(8);
    if magic != MAGIC {
        return Err("bad magic: not a kernel cache entry, or an older format".into());
    }
    let u32_at = |i: usize| u32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
    let version = u32_at(0);
    if version != FORMAT_VERSION {
        return Err(format!(
            "format version {version}, expected {FORMAT_VERSION}"
        ));
    }
    let key_len = u32_at(4) as u64;
    let meta_len = u32_at(8) as u64;
    let mut cubin_len = [0u8; 8];
    cubin_len.copy_from_slice(&rest[12..20]);
    let cubin_len = u64::from_le_bytes(cubin_len);
    if key_len > MAX_KEY as u64 {
        return Err(format!("key length {key_len} exceeds {MAX_KEY}"));
    }
    let expected = (HEADER as u64 + DIGEST as u64)
        .checked_add(key_len)
        .and_then(|n| n.checked_add(meta_len))
        .and_then(|n| n.checked_add(cubin_len));
    if expected != Some(bytes.len() as u64) {
        return Err(format!(
            "length mismatch: the header promises {} bytes, the entry has {} (truncated or extended)",
            expected.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()),
            bytes.len()
        ));
    }
    let (body, digest) = bytes.split_at(bytes.len() - DIGEST);
    if Sha256::digest(body).as_slice() != digest {
        return Err("checksum mismatch".into());
    }
    // The lengths add up to the size, so these slices are in bounds.
    let (stored_key, rest) = body[HEADER..].split_at(key_len as usize);
    let (meta, cubin) = rest.split_at(meta_len as usize);
    if stored_key != key.as_bytes() {
        return Err(format!(
            "stored under key '{}', looked up as '{key}'",
            String::from_utf8_lossy(stored_key)
        ));
    }
    let meta = std::str::from_utf8(meta).map_err(|_| "metadata is not UTF-8".to_string())?;
    Ok((meta, cubin))
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

    /// Runs `f` on a thread; `None` if it has not returned within `secs` (it blocked).
    fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(secs)).ok()
    }

    fn mkfifo(p: &Path) {
        let ok = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mkfifo {} failed", p.display());
    }

    /// Another key's entry copied into place has a valid checksum over its payload, which is
    /// all an unkeyed entry checked: it must still not load, as the key is part of the entry.
    #[test]
    fn an_entry_copied_under_another_key_is_not_loaded() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache::at(d.path()).unwrap();
        c.put("aaaa", "{\"planted\":1}", b"planted cubin").unwrap();
        std::fs::copy(d.path().join("aaaa.cubin"), d.path().join("bbbb.cubin")).unwrap();
        match c.get("bbbb") {
            Lookup::Hit(..) => panic!("an entry stored under another key was loaded"),
            Lookup::Corrupt(r) => assert!(r.contains("key"), "{r}"),
            Lookup::Miss => {}
        }
        assert!(matches!(c.get("aaaa"), Lookup::Hit(..)));
    }

    #[test]
    fn truncated_or_extended_entries_are_not_loaded() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache::at(d.path()).unwrap();
        c.put("k", "meta", b"cubin-bytes").unwrap();
        let p = d.path().join("k.cubin");
        let full = std::fs::read(&p).unwrap();
        let cuts = [0, 1, 8, HEADER - 1, HEADER, full.len() / 2, full.len() - 1];
        for cut in cuts {
            std::fs::write(&p, &full[..cut]).unwrap();
            assert!(
                matches!(c.get("k"), Lookup::Corrupt(_)),
                "an entry cut to {cut} of {} bytes",
                full.len()
            );
        }
        let mut longer = full.clone();
        longer.push(0);
        std::fs::write(&p, &longer).unwrap();
        assert!(matches!(c.get("k"), Lookup::Corrupt(_)));
        std::fs::write(&p, &full).unwrap();
        assert!(matches!(c.get("k"), Lookup::Hit(..)));
    }

    /// A FIFO planted at an entry's path must not block the lookup (and every compile).
    #[test]
    fn a_fifo_at_an_entry_does_not_block() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache::at(d.path()).unwrap();
        mkfifo(&d.path().join("k.cubin"));
        let r = within(10, move || matches!(c.get("k"), Lookup::Hit(..)));
        assert_eq!(r, Some(false), "the lookup blocked on a FIFO or loaded it");
    }

    #[test]
    fn keys_cannot_leave_the_folder() {
        let d = tempfile::tempdir().unwrap();
        let c = Cache::at(d.path().join("c")).unwrap();
        assert!(matches!(
            c.put("../escaped", "m", b"x"),
            Err(Error::Cache { .. })
        ));
        assert!(!d.path().join("escaped.cubin").exists());
        std::fs::write(d.path().join("escaped.cubin"), b"x").unwrap();
        assert!(matches!(c.get("../escaped"), Lookup::Miss));
        assert!(matches!(c.put("", "m", b"x"), Err(Error::Cache { .. })));
    }

    /// A folder that cannot be created (its parent is a regular file) is no cache and no
    /// error: compiles go on in memory.
    #[test]
    fn an_uncreatable_folder_is_no_cache_not_an_error() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(Cache::usable(file.join("kernels")).is_none());
        assert!(matches!(
            Cache::at(file.join("kernels")),
            Err(Error::Cache { .. })
        ));
        // A folder that goes away after opening: writing is a typed error, reading a miss.
        let dir = d.path().join("gone");
        let c = Cache::at(&dir).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        std::fs::write(&dir, b"now a file").unwrap();
        assert!(matches!(c.put("k", "m", b"x"), Err(Error::Cache { .. })));
        assert!(matches!(c.get("k"), Lookup::Miss));
    }

    #[test]
    fn created_folders_are_owner_only_and_shared_ones_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("fp8-sdpa/kernels");
        Cache::at(&dir).unwrap();
        for p in [d.path().join("fp8-sdpa"), dir] {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", p.display());
        }
        let shared = d.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(matches!(Cache::at(&shared), Err(Error::Cache { .. })));
        assert!(Cache::usable(&shared).is_none());
    }

    #[test]
    fn without_home_or_the_variable_there_is_no_disk_cache() {
        let home = PathBuf::from("/home/u/.cache");
        assert_eq!(resolve_dir(None, None), None);
        assert_eq!(resolve_dir(Some("".into()), None), None);
        assert_eq!(
            resolve_dir(None, Some(home.clone())),
            Some(home.join("fp8-sdpa/kernels"))
        );
        assert_eq!(
            resolve_dir(Some("/x/y".into()), Some(home)),
            Some(PathBuf::from("/x/y"))
        );
    }

    /// Set in the child process of `home_unset_is_never_a_shared_temporary_folder`.
    const PROBE_ENV: &str = "SDPA_TEST_CACHE_PROBE";

    /// With HOME, XDG_CACHE_HOME and SDPA_CACHE_DIR unset (in a child process: the
    /// environment is process-wide), the cache is the passwd home's or none, never under the
    /// temporary folder.
    #[test]
    fn home_unset_is_never_a_shared_temporary_folder() {
        if std::env::var_os(PROBE_ENV).is_some() {
            if let Some(d) = Cache::default_dir() {
                assert!(
                    !d.starts_with(std::env::temp_dir()) && !d.starts_with("/tmp"),
                    "{}",
                    d.display()
                );
            }
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "compile::cache::tests::home_unset_is_never_a_shared_temporary_folder",
                "--test-threads=1",
            ])
            .env(PROBE_ENV, "1")
            .env_remove("HOME")
            .env_remove("XDG_CACHE_HOME")
            .env_remove(CACHE_ENV)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "child failed:\n{text}");
        assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
    }

    proptest::proptest! {
        /// Whatever the bytes, decoding returns an entry or a reason; it never panics.
        #[test]
        fn decoding_any_bytes_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            key in "[0-9a-f]{0,8}",
        ) {
            let _ = decode_entry(&bytes, &key);
        }

        /// An entry decodes to what was stored, under its own key only; any one byte changed,
        /// or any cut, makes it invalid.
        #[test]
        fn entries_round_trip_only_with_their_own_key(
            key in "[0-9A-Za-z_-]{1,64}",
            other in "[0-9A-Za-z_-]{1,64}",
            meta in ".{0,40}",
            cubin in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            pos in proptest::prelude::any::<usize>(),
            flip in 1u8..=255,
        ) {
            let e = encode_entry(&key, &meta, &cubin).unwrap();
            proptest::prop_assert_eq!(decode_entry(&e, &key), Ok((meta.as_str(), cubin.as_slice())));
            if other != key {
                proptest::prop_assert!(decode_entry(&e, &other).is_err());
            }
            let mut bad = e.clone();
            bad[pos % e.len()] ^= flip;
            proptest::prop_assert!(decode_entry(&bad, &key).is_err());
            proptest::prop_assert!(decode_entry(&e[..pos % e.len()], &key).is_err());
        }
    }
}
