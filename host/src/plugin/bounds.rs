//! Bounds on what a plugin hands the host outside its decisions, and on the
//! files the host reads as plugins.
//!
//! - `name()`: 1 to [`MAX_NAME_BYTES`] bytes of printable ASCII (space to
//!   `~`). The name is copied into every `/metrics` and `/admin/plugins`
//!   answer and into log lines, so an unbounded name grew every such answer
//!   (a 64 MiB name made `/metrics` ~85 MB) and a name with newlines forged
//!   log lines. A plugin whose name breaks the bound is refused at load and at
//!   swap, with the reason.
//! - Decision lists (`schedule`, `pick-victims`, `plan`, `pick`) are bounded
//!   by the guest memory cap (the host copies at most that much) and by the
//!   decision rules in [`super::validate`]: ids must be known and distinct, so
//!   no list is longer than the views it answers.
//! - A plugin file must be a regular file of at most [`MAX_PLUGIN_FILE_BYTES`]
//!   ([`read_plugin_file`]): a FIFO used to block the loader (and the swap
//!   request) forever and `/dev/zero` was read without end.

use std::io::Read;
use std::path::Path;

/// Longest plugin name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// Largest plugin file read (a `.cwasm` of a Python component is ~32 MB).
pub const MAX_PLUGIN_FILE_BYTES: u64 = 256 << 20;

/// Checks a plugin's `name()`; the error says what is wrong without
/// echoing more than a short, escaped prefix of the name.
pub fn check_name(name: &str) -> Result<(), String> {
    let shown = || {
        let mut s: String = name
            .chars()
            .take(32)
            .collect::<String>()
            .escape_debug()
            .to_string();
        if name.chars().count() > 32 {
            s.push_str("...");
        }
        s
    };
    if name.is_empty() {
        return Err("`name()` returned an empty string".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "`name()` returned {} bytes (\"{}\"); at most {MAX_NAME_BYTES} bytes are allowed",
            name.len(),
            shown()
        ));
    }
    if let Some(c) = name.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(format!(
            "`name()` returned \"{}\", which contains {:?}; only printable ASCII is allowed",
            shown(),
            c
        ));
    }
    Ok(())
}

/// Reads a plugin file: only a regular file, at most
/// [`MAX_PLUGIN_FILE_BYTES`]. The file is opened without blocking (a FIFO
/// would otherwise wait for a writer) and checked on the opened descriptor,
/// so a path swapped for something else between check and read is caught.
pub fn read_plugin_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind};
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("not a regular file ({})", file_kind(&meta)),
        ));
    }
    if meta.len() > MAX_PLUGIN_FILE_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} bytes, over the {MAX_PLUGIN_FILE_BYTES}-byte limit for a plugin file",
                meta.len()
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // `take` also bounds a file that grows while it is read.
    file.take(MAX_PLUGIN_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_PLUGIN_FILE_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("grew past the {MAX_PLUGIN_FILE_BYTES}-byte limit while being read"),
        ));
    }
    Ok(bytes)
}

fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if meta.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_printable_ascii() {
        assert!(check_name("fcfs").is_ok());
        assert!(check_name(&"a".repeat(MAX_NAME_BYTES)).is_ok());
        let e = check_name(&"a".repeat(MAX_NAME_BYTES + 1)).unwrap_err();
        assert!(e.contains("65 bytes"), "{e}");
        let e = check_name(&"x".repeat(1 << 20)).unwrap_err();
        assert!(
            e.len() < 200,
            "the error must not echo the name: {} bytes",
            e.len()
        );
        let e = check_name("ok\nERROR forged").unwrap_err();
        assert!(!e.contains('\n') && e.contains("\\n"), "{e}");
        assert!(check_name("").is_err());
        assert!(check_name("tab\there").is_err());
        assert!(check_name("caf\u{e9}").is_err());
    }

    #[test]
    fn only_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.wasm");
        std::fs::write(&f, b"\0asm").unwrap();
        assert_eq!(read_plugin_file(&f).unwrap(), b"\0asm");
        let e = read_plugin_file(dir.path()).unwrap_err().to_string();
        assert!(e.contains("directory"), "{e}");
        let e = read_plugin_file(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("character device"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path only.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // With no writer, a blocking open would hang this test forever.
        let e = read_plugin_file(&fifo).unwrap_err().to_string();
        assert!(e.contains("FIFO"), "{e}");
    }
}
