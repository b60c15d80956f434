//! Which files a batch may use: a results file it can read back and replace, distinct from
//! its input.
//!
//! The results file is read to resume, appended to, and at the end replaced by its compacted
//! copy (a new file renamed over it). So it must be a regular file — a pipe, a terminal or a
//! device would hang the read-back or be replaced by a plain file — and it must not be the
//! input, or the run would read its own results back as prompts. Files are compared by
//! identity (device and inode), so a symbolic or hard link to the input is caught too.
//!
//! Links: a symbolic link is followed — the results go to the file it points to, which is the
//! one compaction replaces, and the link stays. A file with several hard links is refused for
//! writing: the rename of compaction would give this name a new file and leave the other
//! names with the old contents.
//!
//! A replacement takes the replaced file's permissions from the moment it is created: a
//! read-only results file stays read-only, and a private one (0600) is never readable by
//! others while its compacted copy is written.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// How the results file will be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only read (resume index).
    Read,
    /// Read, appended to and replaced (writer, compaction).
    Replace,
}

/// The results file at `path` as it will be used: `path` itself, or the target of the
/// symbolic link at `path`. A missing file is fine (it is created as a regular file).
///
/// # Errors
///
/// [`io::ErrorKind::InvalidInput`] when the file is not a regular file, is a symbolic link to
/// nothing, or (for [`Access::Replace`]) has more than one hard link; the error of a `stat`
/// that fails for another reason than a missing file.
pub fn results_file(path: &Path, access: Access) -> io::Result<PathBuf> {
    let link = match fs::symlink_metadata(path) {
        Ok(m) => m.file_type().is_symlink(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(path.to_owned()),
        Err(e) => return Err(e),
    };
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(refused(
                "is a symbolic link to a file that does not exist; give the target's path",
            ));
        }
        Err(e) => return Err(e),
    };
    if !meta.is_file() {
        return Err(refused(&format!(
            "is {}, not a regular file: a results file is read back to resume and replaced \
             by its compacted copy at the end, which only a regular file allows",
            kind_of(&meta)
        )));
    }
    if access == Access::Replace {
        let links = hard_links(&meta);
        if links > 1 {
            return Err(refused(&format!(
                "has {links} hard links: compaction replaces the file by renaming a new one \
                 over it, which would leave the other names with the old results; give a path \
                 with a single link (a symbolic link is followed)"
            )));
        }
    }
    if link {
        fs::canonicalize(path)
    } else {
        Ok(path.to_owned())
    }
}

/// Whether `a` and `b` name the same file (device and inode, links followed). `false` when
/// either does not exist or cannot be looked at (opening it then reports why).
pub fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (fs::metadata(a), fs::metadata(b)) else {
        return false;
    };
    identical(a, &ma, b, &mb)
}

/// A new, empty file at `temp`, to be written and then renamed over `path`, with `path`'s
/// permissions (a missing `path`: the default ones). A file left at `temp` by a run that
/// stopped half-way is removed first; `temp` is created anew, never opened through a link.
///
/// The returned handle is writable whatever the permissions: a 0444 file's replacement is
/// written through it and is 0444 once renamed.
///
/// # Errors
///
/// When `path` cannot be looked at (other than missing), or `temp` cannot be created or
/// given `path`'s permissions.
pub fn create_replacement(path: &Path, temp: &Path) -> io::Result<fs::File> {
    let permissions = match fs::metadata(path) {
        Ok(meta) => Some(meta.permissions()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    match fs::remove_file(temp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if let Some(p) = &permissions {
        // Created no more open than `path` (the umask may take bits away; set below).
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(p.mode() & 0o777);
    }
    let file = options.open(temp)?;
    #[cfg(unix)]
    if let Some(p) = permissions {
        // Exactly `path`'s bits, whatever the umask took away; the handle stays writable.
        if let Err(e) = file.set_permissions(p) {
            drop(file);
            let _ = fs::remove_file(temp);
            return Err(e);
        }
    }
    #[cfg(not(unix))]
    let _ = permissions;
    Ok(file)
}

#[cfg(unix)]
fn identical(_: &Path, a: &fs::Metadata, _: &Path, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn identical(a: &Path, _: &fs::Metadata, b: &Path, _: &fs::Metadata) -> bool {
    matches!((fs::canonicalize(a), fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
}

#[cfg(unix)]
fn hard_links(meta: &fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.nlink()
}

#[cfg(not(unix))]
fn hard_links(_: &fs::Metadata) -> u64 {
    1
}

#[cfg(unix)]
fn kind_of(meta: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a pipe (FIFO)"
    } else if t.is_char_device() {
        "a character device (a terminal, /dev/null, …)"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(not(unix))]
fn kind_of(meta: &fs::Metadata) -> &'static str {
    if meta.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("llm-failover-files-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[cfg(unix)]
    #[test]
    fn links_are_followed_or_refused_and_only_regular_files_pass() {
        let dir = tempdir("links");
        let file = dir.join("results.jsonl");
        fs::write(&file, "").unwrap();
        let sym = dir.join("sym.jsonl");
        std::os::unix::fs::symlink(&file, &sym).unwrap();
        let dangling = dir.join("dangling.jsonl");
        std::os::unix::fs::symlink(dir.join("gone"), &dangling).unwrap();
        let missing = dir.join("new.jsonl");

        let real = fs::canonicalize(&file).unwrap();
        assert_eq!(results_file(&file, Access::Replace).unwrap(), file);
        assert_eq!(results_file(&sym, Access::Replace).unwrap(), real);
        assert_eq!(results_file(&missing, Access::Replace).unwrap(), missing);
        // (path, access, a word the refusal must contain)
        let hard = dir.join("hard.jsonl");
        fs::hard_link(&file, &hard).unwrap();
        let cases = [
            (dir.clone(), Access::Read, "directory"),
            (dangling, Access::Read, "does not exist"),
            (PathBuf::from("/dev/null"), Access::Read, "character device"),
            (hard.clone(), Access::Replace, "2 hard links"),
            (file.clone(), Access::Replace, "2 hard links"),
        ];
        for (path, access, word) in cases {
            let err = results_file(&path, access).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{path:?}");
            assert!(err.to_string().contains(word), "{path:?}: {err}");
        }
        assert_eq!(results_file(&hard, Access::Read).unwrap(), hard);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_replacement_has_the_files_permissions_from_its_creation() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempdir("replacement");
        for mode in [0o444, 0o600, 0o640, 0o664] {
            let path = dir.join(format!("r-{mode:o}.jsonl"));
            let temp = dir.join(format!("r-{mode:o}.jsonl.compacting"));
            fs::write(&path, "old\n").unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            // A stale temporary file of a run that stopped: replaced, not appended to.
            fs::write(&temp, "stale stale stale\n").unwrap();
            let mut file = create_replacement(&path, &temp).unwrap();
            let created = fs::metadata(&temp).unwrap().permissions().mode() & 0o7777;
            assert_eq!(
                created, mode,
                "{created:o} for a {mode:o} file, before a byte"
            );
            file.write_all(b"new\n").unwrap();
            drop(file);
            fs::rename(&temp, &path).unwrap();
            assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
            let now = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(now, mode);
        }
        // No file yet: the default permissions.
        let new = dir.join("new.jsonl");
        create_replacement(&new, &dir.join("new.jsonl.compacting")).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_link_left_at_the_temporary_path_is_not_followed() {
        let dir = tempdir("temp-link");
        let (path, temp, victim) = (dir.join("r.jsonl"), dir.join("t"), dir.join("victim"));
        fs::write(&path, "old\n").unwrap();
        fs::write(&victim, "keep me\n").unwrap();
        std::os::unix::fs::symlink(&victim, &temp).unwrap();
        create_replacement(&path, &temp).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me\n");
        assert!(
            !fs::symlink_metadata(&temp)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn the_same_file_is_recognised_through_any_link() {
        let dir = tempdir("same");
        let (a, b) = (dir.join("a"), dir.join("b"));
        fs::write(&a, "x").unwrap();
        fs::write(&b, "x").unwrap();
        std::os::unix::fs::symlink(&a, dir.join("sym")).unwrap();
        fs::hard_link(&a, dir.join("hard")).unwrap();
        assert!(same_file(&a, &a));
        assert!(same_file(&a, &dir.join("sym")));
        assert!(same_file(&dir.join("hard"), &a));
        assert!(same_file(&a, &dir.join(".").join("a")));
        assert!(!same_file(&a, &b), "same contents, different files");
        assert!(!same_file(&a, &dir.join("missing")));
        fs::remove_dir_all(&dir).unwrap();
    }
}
