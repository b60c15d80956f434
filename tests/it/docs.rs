//! The documents' links resolve: every relative link in the repository's Markdown files
//! (README, DESIGN, BENCHMARKS, RELIABILITY, the emulator's README) names a file or directory
//! that exists.

use std::path::{Path, PathBuf};

/// The `target` of each `[text](target)` in `markdown` (inline links; not inside code).
fn links(markdown: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code spans are not links.
        let text: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n + 1, after[..end].trim().to_owned()));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_documents_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut documents: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    documents.push(root.join("emulator/README.md"));
    assert!(documents.iter().any(|d| d.ends_with("README.md")));
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in &documents {
        let text = std::fs::read_to_string(doc).unwrap();
        for (line, target) in links(&text) {
            if target.is_empty()
                || target.starts_with('#')
                || target.contains("://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let path = target.split('#').next().unwrap_or_default();
            checked += 1;
            if !doc.parent().unwrap().join(path).exists() {
                broken.push(format!("{}:{line}: {target}", doc.display()));
            }
        }
    }
    assert!(
        checked > 5,
        "only {checked} links found: is the parser right?"
    );
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_link_finder_sees_links_and_skips_code() {
    let md = "see [a](x.md) and `[b](not-a-link)`\n```\n[c](fenced)\n```\n[d](y/z.rs#L3) [e](#top)";
    let found: Vec<String> = links(md).into_iter().map(|(_, t)| t).collect();
    assert_eq!(found, ["x.md", "y/z.rs#L3", "#top"]);
}
