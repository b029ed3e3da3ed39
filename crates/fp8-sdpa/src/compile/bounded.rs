//! Reading a file the library did not write itself (a kernel cache entry, the user's tuned
//! table) without trusting what sits at its path: only a regular file is read, and only up to
//! a limit. A FIFO would block the reading thread until some writer came (every dispatch,
//! for the tuned table), and a device such as `/dev/zero` would never end.

use std::io::Read;
use std::path::Path;

/// Why a file was not read.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    /// Opening or reading failed (missing, no permission, ...).
    Io(std::io::Error),
    /// The path names something other than a regular file; the text says what.
    NotRegular(&'static str),
    /// The file holds more than the limit (the limit, in bytes).
    TooLarge(u64),
}

impl std::fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFailure::Io(e) => write!(f, "{e}"),
            ReadFailure::NotRegular(what) => write!(f, "is {what}, not a regular file"),
            ReadFailure::TooLarge(max) => write!(f, "is larger than {max} bytes"),
        }
    }
}

/// O_NONBLOCK, so that opening a FIFO returns at once instead of waiting for a writer; the
/// type is checked on the open file right after. Linux's value on the arches CUDA ships for;
/// elsewhere 0, and the check before opening is what keeps a FIFO out.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
const O_NONBLOCK: i32 = 0o4000;
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
const O_NONBLOCK: i32 = 0;

fn kind(t: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a folder")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() || t.is_block_device() {
        Some("a device")
    } else {
        Some("not a regular file")
    }
}

/// The contents of the regular file at `path` (symbolic links followed), at most `max`
/// bytes; anything else at the path is refused without blocking.
pub(crate) fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, ReadFailure> {
    use std::os::unix::fs::OpenOptionsExt;
    // Checked before opening too: where O_NONBLOCK is 0, opening a FIFO would block.
    let pre = std::fs::metadata(path).map_err(ReadFailure::Io)?;
    if let Some(k) = kind(pre.file_type()) {
        return Err(ReadFailure::NotRegular(k));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)
        .map_err(ReadFailure::Io)?;
    // The path may have been replaced between the check and the open: check what was opened.
    let meta = file.metadata().map_err(ReadFailure::Io)?;
    if let Some(k) = kind(meta.file_type()) {
        return Err(ReadFailure::NotRegular(k));
    }
    if meta.len() > max {
        return Err(ReadFailure::TooLarge(max));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    // The file may grow after the size check: read one byte past the limit to see it.
    file.take(max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(ReadFailure::Io)?;
    if out.len() as u64 > max {
        return Err(ReadFailure::TooLarge(max));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_regular_files_within_the_limit_only() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"12345").unwrap();
        assert_eq!(read_regular(&p, 5).unwrap(), b"12345");
        assert!(matches!(read_regular(&p, 4), Err(ReadFailure::TooLarge(4))));
        assert!(matches!(
            read_regular(d.path(), 100),
            Err(ReadFailure::NotRegular("a folder"))
        ));
        assert!(matches!(
            read_regular(Path::new("/dev/zero"), 100),
            Err(ReadFailure::NotRegular("a device"))
        ));
        assert!(matches!(
            read_regular(&d.path().join("missing"), 100),
            Err(ReadFailure::Io(_))
        ));
    }
}
