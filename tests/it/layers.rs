//! In every crate of the workspace (cargo refuses a cycle between crates), the modules
//! import each other in one direction only.
//!
//! Reads every file under each member's `src/` (code only: comments and `#[cfg(test)]`
//! modules are left out), resolves each `crate::`, `super::`, `self::` and child-module path
//! — in `use` declarations and in code — to the module that defines the item (following
//! `pub use` re-exports, which are a module's table of contents, not a dependency), and
//! builds, for every module, the graph of its children: an edge `a → b` when something in
//! `a` names something in `b`, and `a → (self)` / `(self) → a` when a child names an item
//! its parent defines or the parent's own code names a child's item. Every such graph must
//! be acyclic; a cycle fails naming the crate, the module, the files and the lines.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Module = Vec<String>;

struct File {
    module: Module,
    /// Code with comments and test modules removed, one entry per source line.
    lines: Vec<String>,
    path: PathBuf,
}

fn files(root: &Path) -> Vec<File> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root).unwrap();
                // Beside a `lib.rs`, `main.rs` is a crate of its own over the library.
                if rel == Path::new("main.rs") && root.join("lib.rs").exists() {
                    continue;
                }
                let mut parts: Vec<String> = rel
                    .iter()
                    .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_owned())
                    .collect();
                let last = parts.last().cloned().unwrap_or_default();
                if last == "mod" || last == "lib" || last == "main" {
                    parts.pop();
                }
                let text = fs::read_to_string(&p).unwrap();
                out.push(File {
                    module: parts,
                    lines: code_lines(&text),
                    path: p,
                });
            }
        }
    }
    // A module declared under `#[cfg(test)]` (a test file) may use anything: left out, with
    // everything under it.
    let mut tests: Vec<Module> = Vec::new();
    for f in &out {
        let text = fs::read_to_string(&f.path).unwrap();
        let mut lines = text.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line == "#[cfg(test)]"
                && let Some(name) = lines
                    .next()
                    .and_then(|l| l.strip_prefix("mod "))
                    .and_then(|l| l.strip_suffix(';'))
            {
                let mut m = f.module.clone();
                m.push(name.to_owned());
                tests.push(m);
            }
        }
    }
    out.retain(|f| !tests.iter().any(|t| f.module.starts_with(t)));
    out.sort_by(|a, b| a.module.cmp(&b.module));
    out
}

/// The code of `text`, line by line: comments and string literals blanked, and everything
/// from a `#[cfg(test)]` attribute on (the tests at the bottom of a file) dropped.
fn code_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = 0usize;
    // A string literal may go on over several lines (a `\` at the end of one): its later
    // lines are not code.
    let mut in_str = false;
    for raw in text.lines() {
        if !in_str && raw.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let mut line = String::new();
        let b = raw.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if in_block > 0 {
                if b[i..].starts_with(b"*/") {
                    in_block -= 1;
                    i += 2;
                } else if b[i..].starts_with(b"/*") {
                    in_block += 1;
                    i += 2;
                } else {
                    i += 1;
                }
                continue;
            }
            if in_str {
                if b[i] == b'\\' {
                    i += 2;
                    continue;
                }
                if b[i] == b'"' {
                    in_str = false;
                    line.push('"');
                }
                i += 1;
                continue;
            }
            if b[i..].starts_with(b"//") {
                break;
            }
            if b[i..].starts_with(b"/*") {
                in_block += 1;
                i += 2;
                continue;
            }
            if b[i] == b'"' {
                in_str = true;
                line.push('"');
                i += 1;
                continue;
            }
            line.push(b[i] as char);
            i += 1;
        }
        out.push(line);
    }
    out
}

/// One `use` declaration, flattened: (is a re-export, full paths as written).
fn use_trees(stmt: &str) -> (bool, Vec<Vec<String>>) {
    let s = stmt.trim();
    let reexport = s.starts_with("pub ") || s.starts_with("pub(");
    let body = match s.strip_prefix("use ") {
        Some(rest) => rest,
        None => s.split_once(" use ").map_or(s, |(_, rest)| rest),
    };
    let body = body.trim().trim_end_matches(';');
    let mut out = Vec::new();
    expand(&[], body, &mut out);
    (reexport, out)
}

fn expand(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect();
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut p = prefix.to_vec();
        p.extend(head);
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&p, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&p, &inner[start..], out);
        return;
    }
    let path = tree.split(" as ").next().unwrap_or(tree);
    let mut p = prefix.to_vec();
    p.extend(path.split("::").map(|s| s.trim().to_owned()));
    if p.last().is_some_and(|l| l == "self") {
        p.pop();
    }
    out.push(p);
}

struct Crate {
    files: Vec<File>,
    modules: BTreeSet<Module>,
    /// (module, name) → the path it re-exports.
    reexports: BTreeMap<(Module, String), Module>,
}

impl Crate {
    /// An absolute path for `path` as written in `file`, or `None` for another crate.
    fn absolute(&self, file: &File, path: &[String]) -> Option<Vec<String>> {
        let first = path.first()?;
        let mut base = file.module.clone();
        let mut rest = path;
        match first.as_str() {
            "crate" => {
                base.clear();
                rest = &path[1..];
            }
            "self" => rest = &path[1..],
            "super" => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            name => {
                // A child module of this one (2018 paths), else another crate.
                let mut child = base.clone();
                child.push(name.to_owned());
                if !self.modules.contains(&child) {
                    return None;
                }
            }
        }
        let mut abs = base;
        abs.extend(rest.iter().cloned());
        Some(abs)
    }

    /// The module that defines what `abs` names (re-exports followed).
    fn defining(&self, abs: &[String], depth: usize) -> Module {
        let mut m: Module = Vec::new();
        for seg in abs {
            let mut next = m.clone();
            next.push(seg.clone());
            if self.modules.contains(&next) {
                m = next;
                continue;
            }
            if depth < 16
                && let Some(target) = self.reexports.get(&(m.clone(), seg.clone()))
            {
                return self.defining(target, depth + 1);
            }
            break;
        }
        m
    }
}

fn parse(files: Vec<File>) -> Crate {
    let modules: BTreeSet<Module> = files.iter().map(|f| f.module.clone()).collect();
    let mut c = Crate {
        files: Vec::new(),
        modules,
        reexports: BTreeMap::new(),
    };
    for f in &files {
        for stmt in statements(f) {
            let (reexport, paths) = use_trees(&stmt.2);
            if !reexport {
                continue;
            }
            for p in paths {
                let name = p.last().filter(|n| *n != "*");
                if let (Some(name), Some(abs)) = (name, c.absolute(f, &p)) {
                    c.reexports.insert((f.module.clone(), name.clone()), abs);
                }
            }
        }
    }
    c.files = files;
    c
}

/// The `use` statements of a file: (first line, last line, text).
fn statements(f: &File) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    for (i, line) in f.lines.iter().enumerate() {
        let t = line.trim();
        if cur.is_none() {
            let is_use = t.starts_with("use ")
                || ((t.starts_with("pub ") || t.starts_with("pub(")) && t.contains(" use "));
            if !is_use {
                continue;
            }
            cur = Some((i + 1, String::new()));
        }
        if let Some((_, s)) = cur.as_mut() {
            s.push_str(t);
            s.push(' ');
            if t.ends_with(';') {
                let (first, s) = cur.take().unwrap();
                out.push((first, i + 1, s));
            }
        }
    }
    out
}

/// Paths named in code outside `use` statements: `crate::…`, `super::…`, `self::…`.
fn inline_paths(line: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let b = line.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(pos) = line[from..].find(start) {
            let at = from + pos;
            from = at + start.len();
            let boundary = at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_');
            if !boundary || (at > 0 && b[at - 1] == b'$') || (at >= 2 && &line[at - 2..at] == "::")
            {
                continue;
            }
            let tail: String = line[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let segs: Vec<String> = tail
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            out.push(segs);
        }
    }
    out
}

/// Where a use of `target` from `source` lands in the graph of their lowest common ancestor:
/// `(ancestor, from, to)`, each end a child's name or `(self)`.
fn edge(source: &Module, target: &Module) -> Option<(Module, String, String)> {
    if source == target {
        return None;
    }
    let common = source
        .iter()
        .zip(target)
        .take_while(|(a, b)| a == b)
        .count();
    let lca: Module = source[..common].to_vec();
    let side = |m: &Module| {
        m.get(common)
            .cloned()
            .unwrap_or_else(|| "(self)".to_owned())
    };
    let (from, to) = (side(source), side(target));
    (from != to).then_some((lca, from, to))
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR"));
    let toml = |dir: &Path| -> toml::Table {
        fs::read_to_string(dir.join("Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap()
    };
    // crate::ancestor → from → to → first place seen.
    let mut graphs: BTreeMap<Module, BTreeMap<String, BTreeMap<String, String>>> = BTreeMap::new();
    for member in toml(ws)["workspace"]["members"].as_array().unwrap() {
        let dir = ws.join(member.as_str().unwrap());
        if !dir.join("src").is_dir() {
            continue;
        }
        let name = toml(&dir)["package"]["name"]
            .as_str()
            .unwrap()
            .replace('-', "_");
        let krate = parse(files(&dir.join("src")));
        for f in &krate.files {
            let mut named: Vec<(usize, Vec<String>)> = Vec::new();
            let uses = statements(f);
            for (line, _, stmt) in &uses {
                let (reexport, paths) = use_trees(stmt);
                if !reexport {
                    named.extend(paths.into_iter().map(|p| (*line, p)));
                }
            }
            for (i, line) in f.lines.iter().enumerate() {
                if !uses
                    .iter()
                    .any(|(first, last, _)| (*first..=*last).contains(&(i + 1)))
                {
                    named.extend(inline_paths(line).into_iter().map(|p| (i + 1, p)));
                }
            }
            for (line, path) in named {
                let target = krate.absolute(f, &path).map(|abs| krate.defining(&abs, 0));
                if let Some((lca, from, to)) = target.and_then(|t| edge(&f.module, &t)) {
                    let at = format!(
                        "{}:{line}",
                        f.path.strip_prefix(ws).unwrap_or(&f.path).display()
                    );
                    graphs
                        .entry([vec![name.clone()], lca].concat())
                        .or_default()
                        .entry(from)
                        .or_default()
                        .entry(to)
                        .or_insert(at);
                }
            }
        }
    }
    let mut cycles = Vec::new();
    for (lca, g) in &graphs {
        for group in tangles(g) {
            let mut edges = Vec::new();
            for from in &group {
                for (to, at) in g.get(from).into_iter().flatten() {
                    if group.contains(to) {
                        edges.push(format!("{from} → {to} ({at})"));
                    }
                }
            }
            cycles.push(format!("in `{}`: {}", lca.join("::"), edges.join(", ")));
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles:\n  {}",
        cycles.join("\n  ")
    );
}

/// The groups of nodes of `g` that reach each other (strongly connected, more than one).
fn tangles(g: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<BTreeSet<String>> {
    let nodes: BTreeSet<&String> = g.keys().chain(g.values().flat_map(|m| m.keys())).collect();
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for next in g.get(&n).into_iter().flat_map(|m| m.keys()) {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for n in &nodes {
        if !reaches[n].contains(*n) || out.iter().any(|g| g.contains(*n)) {
            continue;
        }
        let group: BTreeSet<String> = nodes
            .iter()
            .filter(|m| reaches[n].contains(**m) && reaches[**m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        out.push(group);
    }
    out
}

#[test]
fn the_checker_sees_a_cycle_and_follows_re_exports() {
    // a → b → a is a cycle; a → (self) via a re-export of b's item is an edge to b.
    let mut g: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    g.entry("a".into())
        .or_default()
        .insert("b".into(), "x".into());
    assert!(tangles(&g).is_empty());
    g.entry("b".into())
        .or_default()
        .insert("a".into(), "y".into());
    g.entry("b".into())
        .or_default()
        .insert("c".into(), "z".into());
    let both: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into();
    assert_eq!(tangles(&g), [both]);
    let (_, paths) = use_trees("pub use a::{b::C, d::{E, F as G}, self};");
    assert_eq!(
        paths,
        [
            vec!["a", "b", "C"],
            vec!["a", "d", "E"],
            vec!["a", "d", "F"],
            vec!["a"],
        ]
    );
    assert_eq!(
        edge(&vec!["x".into(), "y".into()], &vec!["x".into()]),
        Some((vec!["x".to_owned()], "y".to_owned(), "(self)".to_owned()))
    );
    assert_eq!(
        inline_paths("let x = crate::ratelimit::preload(m); super::foo::Bar"),
        [
            vec!["crate", "ratelimit", "preload"],
            vec!["super", "foo", "Bar"]
        ]
    );
}

/// What cargo cannot see: the core dev-depends on the facade, so its doc examples read as an
/// application writes them (`use llm_failover::…`). A unit test of the core that named the
/// facade would link the core twice (its test build and, under the facade, the plain one)
/// and the Redis wing with the plain one; so the core's code, tests included, names neither
/// the facade nor a wing — only its doc comments do.
#[test]
fn the_core_names_no_wing_and_not_the_facade() {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("core/src");
    let mut named = Vec::new();
    let mut stack = vec![core.clone()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            for (i, line) in fs::read_to_string(&p).unwrap().lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                // A string (a tracing target such as "llm_failover::send") names nothing.
                let code: String = code.split('"').step_by(2).collect();
                for name in ["llm_failover::", "llm_failover_redis", "llm_failover_queue"] {
                    if code.contains(name) {
                        named.push(format!("{}:{}: {name}", p.display(), i + 1));
                    }
                }
            }
        }
    }
    assert!(
        named.is_empty(),
        "the core names:\n  {}",
        named.join("\n  ")
    );
}
