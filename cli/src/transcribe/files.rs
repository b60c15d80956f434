//! The files a run names: found (files, directories, globs), read, checked and hashed; the
//! demo's recordings.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use llm_failover::AudioInput;
use sha2::{Digest, Sha256};

/// The audio files a directory picks, by extension (any case): those the SDK takes
/// (`AudioInput::from_bytes`).
const AUDIO_EXTENSIONS: &[&str] = &[
    "wav", "wave", "mp3", "mpga", "mpeg", "m4a", "mp4", "ogg", "oga", "opus", "flac", "webm", "aac",
];

/// Where the demo's recordings are written when no file is named.
const DEMO_DIR: &str = "demo-recordings";

/// A file to transcribe, as found (not read yet).
#[derive(Debug, Clone)]
pub(super) struct Found {
    /// The path as named (a directory's files joined to it), without `./`: the item's id.
    pub(super) file: String,
    /// Where it is on disk.
    pub(super) path: PathBuf,
    /// Its tenant.
    pub(super) tenant: String,
    /// The path the `--interactive` pattern is matched against: relative to the directory
    /// named, else as named.
    pub(super) rel: String,
}

/// Every file the `paths` name, in order, each once. A path that does not exist, and a glob
/// that matches no file, are errors.
pub(super) fn find_files(
    paths: &[PathBuf],
    tenant_from_subdir: bool,
) -> Result<Vec<Found>, String> {
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    for path in paths {
        let shown = path.display();
        let text = path.to_string_lossy();
        let mut add = |f: Found| {
            if seen.insert(f.file.clone()) {
                found.push(f);
            }
        };
        if text.contains(['*', '?']) && !path.exists() {
            let matched = glob_files(&text).map_err(|e| format!("{shown}: {e}"))?;
            if matched.is_empty() {
                return Err(format!("{shown} matches no file"));
            }
            for file in matched {
                add(named(&file, tenant_from_subdir));
            }
            continue;
        }
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("no such file or directory: {shown}"),
            _ => format!("cannot read {shown}: {e}"),
        })?;
        if meta.is_dir() {
            let files =
                walk(path).map_err(|e| format!("cannot read the directory {shown}: {e}"))?;
            let audio: Vec<_> = files.into_iter().filter(|(_, rel)| is_audio(rel)).collect();
            if audio.is_empty() {
                eprintln!("warning: no audio file in {shown}");
            }
            for (file, rel) in audio {
                let tenant = tenant_of(&rel, tenant_from_subdir);
                add(Found {
                    file: clean(&file),
                    path: file,
                    tenant,
                    rel,
                });
            }
        } else {
            add(named(path, tenant_from_subdir));
        }
    }
    if found.is_empty() {
        return Err("no audio file to transcribe".to_owned());
    }
    Ok(found)
}

/// A file named by itself (or a glob).
fn named(path: &Path, tenant_from_subdir: bool) -> Found {
    let file = clean(path);
    let tenant = if path.is_absolute() {
        "default".to_owned()
    } else {
        tenant_of(&file, tenant_from_subdir)
    };
    Found {
        rel: file.clone(),
        file,
        path: path.to_owned(),
        tenant,
    }
}

/// `path` as text, `/`-separated, without `.` components (`./a.wav` and `a.wav` are one file).
fn clean(path: &Path) -> String {
    let mut out = String::new();
    for c in path.components() {
        match c {
            Component::CurDir => continue,
            Component::RootDir => {
                out.push('/');
                continue;
            }
            _ => {}
        }
        if !out.is_empty() && !out.ends_with('/') {
            out.push('/');
        }
        out.push_str(&c.as_os_str().to_string_lossy());
    }
    if out.is_empty() { ".".to_owned() } else { out }
}

/// The first directory of `rel` with `--tenant-from-subdir`, else `default`.
fn tenant_of(rel: &str, tenant_from_subdir: bool) -> String {
    match rel.split_once('/') {
        Some((first, _)) if tenant_from_subdir && !first.is_empty() && first != ".." => {
            first.to_owned()
        }
        _ => "default".to_owned(),
    }
}

fn is_audio(name: &str) -> bool {
    Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| AUDIO_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// The files under `dir` (hidden names skipped, symbolic links to directories not followed),
/// in path order: each as `dir` joined with its path, and its path relative to `dir`.
fn walk(dir: &Path) -> std::io::Result<Vec<(PathBuf, String)>> {
    let mut files = Vec::new();
    let mut dirs = vec![(dir.to_path_buf(), String::new())];
    while let Some((current, rel)) = dirs.pop() {
        for entry in std::fs::read_dir(&current)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let kind = entry.file_type()?;
            if kind.is_dir() {
                dirs.push((entry.path(), rel));
            } else if entry.path().is_file() {
                files.push((dir.join(&rel), rel));
            }
        }
    }
    files.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(files)
}

/// The files a glob matches: the directories before its first wildcard are walked, and each
/// file's path is matched (`*` and `?` within a name, `**` across directories).
fn glob_files(pattern: &str) -> std::io::Result<Vec<PathBuf>> {
    let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
    let fixed: Vec<&str> = pattern
        .split('/')
        .take_while(|c| !c.contains(['*', '?']))
        .collect();
    let base = if fixed.is_empty() {
        PathBuf::from(".")
    } else {
        PathBuf::from(fixed.join("/"))
    };
    if !base.is_dir() {
        return Ok(Vec::new());
    }
    let prefix = if fixed.is_empty() {
        String::new()
    } else {
        format!("{}/", fixed.join("/"))
    };
    let mut out = Vec::new();
    for (path, rel) in walk(&base)? {
        if glob(pattern, &format!("{prefix}{rel}")) {
            out.push(path);
        }
    }
    Ok(out)
}

/// Whether `text` matches `pattern`: `?` is one character and `*` any run of characters
/// other than `/`; `**` any run, `/` included.
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    glob_at(&p, &t)
}

fn glob_at(p: &[char], t: &[char]) -> bool {
    match p.first() {
        None => t.is_empty(),
        Some('*') if p.get(1) == Some(&'*') => {
            let rest = &p[2..];
            // `**/` also matches no directory at all.
            (0..=t.len()).any(|i| glob_at(rest, &t[i..]))
                || (rest.first() == Some(&'/') && glob_at(&rest[1..], t))
        }
        Some('*') => {
            let rest = &p[1..];
            let mut i = 0;
            loop {
                if glob_at(rest, &t[i..]) {
                    return true;
                }
                if i == t.len() || t[i] == '/' {
                    return false;
                }
                i += 1;
            }
        }
        Some('?') => t.first().is_some_and(|c| *c != '/') && glob_at(&p[1..], &t[1..]),
        Some(c) => t.first() == Some(c) && glob_at(&p[1..], &t[1..]),
    }
}

/// Whether `pattern` makes the file at `rel` interactive: a glob over its path or its name,
/// or — without `*` or `?` — a prefix of either.
pub(super) fn matches_interactive(pattern: &str, rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    if pattern.contains(['*', '?']) {
        glob(pattern, rel) || glob(pattern, name)
    } else {
        rel.starts_with(pattern) || name.starts_with(pattern)
    }
}

/// A file after reading: its job, or why it cannot be one.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) found: Found,
    pub(super) audio: Result<Recording, String>,
}

/// What a job needs of an audio file.
#[derive(Debug)]
pub(super) struct Recording {
    /// The job's id: the file, `#`, 16 hex digits of its SHA-256.
    pub(super) id: String,
    /// Its absolute path.
    pub(super) path: PathBuf,
    /// Its SHA-256, lower-case hex.
    pub(super) sha256: String,
    /// Its length.
    pub(super) bytes: u64,
}

/// Reads and checks every file (one at a time: only one file's audio is held).
pub(super) fn read_files(files: Vec<Found>) -> Vec<Entry> {
    files
        .into_iter()
        .map(|found| {
            let audio = recording(&found);
            Entry { found, audio }
        })
        .collect()
}

fn recording(found: &Found) -> Result<Recording, String> {
    let path = std::fs::canonicalize(&found.path).map_err(|e| format!("cannot read it: {e}"))?;
    if !is_audio(&found.file) {
        return Err(format!(
            "not an audio file: unknown audio extension (expected one of {})",
            AUDIO_EXTENSIONS.join(", ")
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read it: {e}"))?;
    // The SDK's own check: not empty, a known type, a WAV file's header.
    let name = found.file.rsplit('/').next().unwrap_or(&found.file);
    let len = bytes.len() as u64;
    let sha256 = hex(&Sha256::digest(&bytes));
    AudioInput::from_bytes(bytes, name).map_err(|e| e.message().to_owned())?;
    Ok(Recording {
        id: format!("{}#{}", found.file, &sha256[..16]),
        path,
        sha256,
        bytes: len,
    })
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The file a job id stands for (the text before its last `#`).
pub(super) fn file_of(job_id: &str) -> &str {
    job_id.rsplit_once('#').map_or(job_id, |(file, _)| file)
}

/// The demo's recordings, written to `demo-recordings/` here where missing: two tenants, one
/// urgent call.
pub(super) fn write_demo_recordings() -> Result<PathBuf, Box<dyn std::error::Error>> {
    const MEMO: &[u8] = include_bytes!("../../../examples/memo.wav");
    let dir = PathBuf::from(DEMO_DIR);
    let silence = llm_failover_emulator::text::silent_wav;
    let files = [
        ("acme/memo.wav", MEMO.to_vec()),
        ("acme/urgent-outage.wav", silence(2.0)),
        ("globex/voicemail.wav", MEMO.to_vec()),
        ("globex/standup.wav", silence(3.5)),
    ];
    let mut wrote = false;
    for (rel, bytes) in files {
        let path = dir.join(rel);
        if !path.exists() {
            std::fs::create_dir_all(path.parent().unwrap_or(&dir))
                .and_then(|()| std::fs::write(&path, bytes))
                .map_err(|e| format!("cannot write the demo's {}: {e}", path.display()))?;
            wrote = true;
        }
    }
    if wrote {
        eprintln!(
            "no audio named: the demo's recordings are in {DEMO_DIR}/ (tenants from \
             subdirectories, urgent* interactive)"
        );
    }
    Ok(dir)
}

/// The results file must be a regular file (or none yet).
pub(super) fn check_output(output: &Path) -> Result<(), String> {
    match std::fs::metadata(output) {
        Ok(meta) if !meta.is_file() => Err(format!(
            "the results file {} is not a regular file",
            output.display()
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_within_a_name_and_across_directories_with_two_stars() {
        let cases = [
            ("calls/*.wav", "calls/a.wav", true),
            ("calls/*.wav", "calls/x/a.wav", false),
            ("calls/**/*.wav", "calls/x/y/a.wav", true),
            ("calls/**/*.wav", "calls/a.wav", true),
            ("c?lls/*", "calls/a.mp3", true),
            ("*.wav", "a.mp3", false),
            ("**", "a/b/c", true),
        ];
        for (pattern, text, want) in cases {
            assert_eq!(glob(pattern, text), want, "{pattern} {text}");
        }
    }

    #[test]
    fn interactive_patterns_are_globs_or_prefixes() {
        assert!(matches_interactive("urgent*", "acme/urgent-outage.wav"));
        assert!(matches_interactive("acme/*", "acme/memo.wav"));
        assert!(matches_interactive("*.mp3", "a/b/c.mp3"));
        assert!(matches_interactive("c?ll.wav", "call.wav"));
        assert!(!matches_interactive("*.mp3", "a/b/c.wav"));
        assert!(matches_interactive("urgent", "acme/urgent-outage.wav"));
        assert!(matches_interactive("acme/", "acme/memo.wav"));
        assert!(!matches_interactive("memo", "acme/urgent-outage.wav"));
    }

    #[test]
    fn a_file_is_named_by_its_path_without_dots_and_its_tenant_is_its_first_directory() {
        assert_eq!(clean(Path::new("./calls/./a.wav")), "calls/a.wav");
        assert_eq!(clean(Path::new("/tmp/a.wav")), "/tmp/a.wav");
        assert_eq!(tenant_of("acme/a.wav", true), "acme");
        assert_eq!(tenant_of("acme/a.wav", false), "default");
        assert_eq!(tenant_of("a.wav", true), "default");
        assert_eq!(tenant_of("../a.wav", true), "default");
        assert_eq!(file_of("calls/a#b.wav#0123456789abcdef"), "calls/a#b.wav");
    }
}
