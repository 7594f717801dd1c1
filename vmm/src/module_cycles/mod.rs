//! The check that `vmm/src`'s modules use each other without a cycle: each file is a node
//! (`config/patch.rs` is `config::patch`, `config/mod.rs` is `config`), and a file has an edge to
//! every module a path in its code names (`use crate::config::VmConfig;`, `super::invalid(..)`,
//! `crate::drive::open(..)`, a child's `fs_rules::rules_for(..)`), resolved to the deepest file
//! module on the path. Comments, strings and `#[cfg(test)]` items (tests use everything) are left
//! out; `main.rs` is the binary, a crate of its own.
//!
//! Run it with `cargo test -p vmm --lib module_cycles`; with `-- --nocapture` it also prints the
//! modules leaves first, each with what it uses.

mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use source::{drop_test_items, strip, tokens, use_paths, Tok};

/// A file module's path below the crate (`config::patch`; `""` for `lib.rs`).
type Module = String;

/// One use of a module: where, and the path as written.
#[derive(Debug, Clone)]
struct Evidence {
    line: usize,
    path: String,
}

/// The graph: module → the modules it uses, with the first place it does.
type Graph = BTreeMap<Module, BTreeMap<Module, Evidence>>;

fn module_of(rel: &Path) -> Module {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

fn display(m: &str) -> &str {
    if m.is_empty() {
        "lib"
    } else {
        m
    }
}

/// The file module a path written in `from` names, if it is one of this crate's.
fn resolve(from: &str, path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    let mut base: Vec<String> = if from.is_empty() {
        Vec::new()
    } else {
        from.split("::").map(str::to_string).collect()
    };
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        Some(first) => {
            let mut child = base.clone();
            child.push(first.to_string());
            if !modules.contains(&child.join("::")) {
                return None;
            }
        }
        None => return None,
    }
    for seg in rest {
        let mut next = base.clone();
        next.push(seg.clone());
        if modules.contains(&next.join("::")) {
            base = next;
        } else {
            break;
        }
    }
    Some(base.join("::"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module graph of the crate whose sources are under `src`.
fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| f.file_name().is_some_and(|n| n != "main.rs"));
    let mut sources = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap_or(f);
        let text = std::fs::read_to_string(f).unwrap_or_default();
        sources.insert(module_of(rel), drop_test_items(tokens(&strip(&text))));
    }
    let test_only: Vec<Module> = sources
        .iter()
        .flat_map(|(m, (_, tests))| {
            tests.iter().map(move |t| match m.as_str() {
                "" => t.clone(),
                m => format!("{m}::{t}"),
            })
        })
        .collect();
    sources.retain(|m, _| {
        !test_only
            .iter()
            .any(|t| m == t || m.starts_with(&format!("{t}::")))
    });
    let modules: BTreeSet<Module> = sources.keys().cloned().collect();
    let mut g = Graph::new();
    for (m, (toks, _)) in &sources {
        let edges = g.entry(m.clone()).or_default();
        let mut add = |path: &[String], line: usize| {
            if let Some(to) = resolve(m, path, &modules) {
                if &to != m && !to.is_empty() {
                    edges.entry(to).or_insert(Evidence {
                        line,
                        path: path.join("::"),
                    });
                }
            }
        };
        let mut i = 0;
        while i < toks.len() {
            let line = toks[i].1;
            let after_path = i > 0 && toks[i - 1].0 == Tok::Path;
            match &toks[i].0 {
                Tok::Ident(s) if s == "use" && !after_path => {
                    i += 1;
                    let mut paths = Vec::new();
                    while i < toks.len() && toks[i].0 != Tok::Semi {
                        use_paths(toks, &mut i, &[], &mut paths);
                        // Past a `,` or a stray `}`; the `;` ends the statement.
                        if toks.get(i).map(|t| &t.0) != Some(&Tok::Semi) {
                            i += 1;
                        }
                    }
                    for p in paths {
                        add(&p, line);
                    }
                }
                Tok::Ident(_)
                    if !after_path && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path) =>
                {
                    let mut path = Vec::new();
                    while let Some((Tok::Ident(s), _)) = toks.get(i) {
                        path.push(s.clone());
                        if toks.get(i + 1).map(|t| &t.0) != Some(&Tok::Path) {
                            break;
                        }
                        i += 2;
                    }
                    add(&path, line);
                }
                _ => {}
            }
            i += 1;
        }
    }
    g
}

/// Strongly connected components with more than one module (Tarjan's algorithm).
fn cycles(g: &Graph) -> Vec<Vec<Module>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.g.get(v).into_iter().flat_map(|e| e.keys()) {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let lw = s.low[w.as_str()];
                let lv = s.low[v];
                s.low.insert(v, lv.min(lw));
            } else if s.on_stack.contains(w.as_str()) {
                let iw = s.index[w.as_str()];
                let lv = s.low[v];
                s.low.insert(v, lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// One cycle through the component's first module, each step with where the path is written.
fn describe_cycle(g: &Graph, scc: &[Module]) -> String {
    let inside: BTreeSet<&str> = scc.iter().map(String::as_str).collect();
    let start = scc[0].as_str();
    // Breadth-first from `start` back to it, inside the component.
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut last = None;
    'search: while let Some(v) = queue.pop_front() {
        for w in g[v].keys().filter(|w| inside.contains(w.as_str())) {
            if w == start {
                last = Some(v);
                break 'search;
            }
            if !prev.contains_key(w.as_str()) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    // `last` → … → `start` through `prev`, turned around, then back to `start`.
    let mut path = Vec::new();
    let mut v = last.unwrap_or(start);
    while v != start {
        path.push(v);
        v = prev[v];
    }
    path.push(start);
    path.reverse();
    path.push(start);
    let steps: Vec<String> = path
        .windows(2)
        .map(|p| {
            let e = &g[p[0]][p[1]];
            format!(
                "  {} -> {}   (line {}: {})",
                display(p[0]),
                display(p[1]),
                e.line,
                e.path
            )
        })
        .collect();
    format!(
        "cycle among {{{}}}:\n{}",
        scc.iter()
            .map(|m| display(m))
            .collect::<Vec<_>>()
            .join(", "),
        steps.join("\n")
    )
}

/// The same graph between top-level modules (`config`, `sandbox`: a folder is one node).
fn top_level(g: &Graph) -> Graph {
    let top = |m: &str| m.split("::").next().unwrap_or_default().to_string();
    let mut t = Graph::new();
    for (m, uses) in g {
        let edges = t.entry(top(m)).or_default();
        for (w, e) in uses.iter().filter(|(w, _)| top(w) != top(m)) {
            edges.entry(top(w)).or_insert(Evidence {
                line: e.line,
                path: format!("{}: {}", display(m), e.path),
            });
        }
    }
    t
}

#[test]
fn vmm_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    assert!(
        g.len() > 40,
        "read {} modules from {}",
        g.len(),
        src.display()
    );
    let top = top_level(&g);
    let mut report = Vec::new();
    for (granularity, graph) in [("files", &g), ("top-level modules", &top)] {
        for c in cycles(graph) {
            report.push(format!("{granularity}: {}", describe_cycle(graph, &c)));
        }
    }
    assert!(
        report.is_empty(),
        "{} import cycle(s) in vmm/src:\n{}",
        report.len(),
        report.join("\n")
    );
    // Leaves first: a module is listed once everything it uses is.
    let mut done: BTreeSet<&str> = BTreeSet::new();
    while done.len() < g.len() {
        let level: Vec<&str> = g
            .iter()
            .filter(|(m, e)| {
                !done.contains(m.as_str()) && e.keys().all(|w| done.contains(w.as_str()))
            })
            .map(|(m, _)| m.as_str())
            .collect();
        for m in &level {
            let uses: Vec<&str> = g[*m].keys().map(|w| display(w)).collect();
            println!("{:<22} uses {}", display(m), uses.join(", "));
        }
        done.extend(level);
    }
}

#[test]
fn paths_resolve_to_file_modules() {
    let modules: BTreeSet<Module> = ["config", "config::patch", "sandbox", "sandbox::fs_rules"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let p = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let r = |from: &str, path: &str| resolve(from, &p(path), &modules);
    assert_eq!(
        r("sandbox", "crate::config::patch::present"),
        Some("config::patch".into())
    );
    assert_eq!(r("config::patch", "super::VmConfig"), Some("config".into()));
    assert_eq!(
        r("sandbox", "fs_rules::rules_for"),
        Some("sandbox::fs_rules".into())
    );
    assert_eq!(r("sandbox", "landlock::Ruleset"), None);
    let code = "use crate::{config::{self, patch::present as p}, sandbox};\n#[cfg(test)]\nmod tests { use crate::x; }\nfn f() { let s = \"crate::no\"; }";
    let (toks, _) = drop_test_items(tokens(&strip(code)));
    let mut i = 1;
    let mut out = Vec::new();
    use_paths(&toks, &mut i, &[], &mut out);
    assert_eq!(
        out,
        vec![
            p("crate::config::self"),
            p("crate::config::patch::present"),
            p("crate::sandbox")
        ]
    );
    assert!(!toks
        .iter()
        .any(|t| t.0 == Tok::Ident("x".into()) || t.0 == Tok::Ident("no".into())));
}

#[test]
fn finds_a_cycle_and_names_its_steps() {
    let dir = std::env::temp_dir().join(format!("osprey-cycles-{}", std::process::id()));
    let files = [
        (
            "lib.rs",
            "pub mod a;\npub mod b;\npub mod c;\n#[cfg(test)]\nmod t;\n",
        ),
        ("a.rs", "use crate::b::X;\n"),
        ("b.rs", "pub struct X;\nfn f() {\n    crate::c::d::g()\n}\n"),
        ("c/mod.rs", "pub mod d;\n// crate::a in a comment\n"),
        (
            "c/d.rs",
            "pub fn g() { let _ = \"crate::a\"; }\n#[cfg(test)]\nmod tests { use crate::a; }\n",
        ),
        ("t.rs", "use crate::a;\n"),
    ];
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().expect("folder")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    let g = graph(&dir);
    assert!(cycles(&g).is_empty(), "comments, strings and tests: {g:?}");
    std::fs::write(dir.join("c/d.rs"), "pub fn g() { crate::a::h() }\n").expect("write");
    let g = graph(&dir);
    let found = cycles(&g);
    assert_eq!(found, vec![vec!["a", "b", "c::d"]]);
    let text = describe_cycle(&g, &found[0]);
    assert!(text.contains("a -> b   (line 1: crate::b::X)"), "{text}");
    assert!(text.contains("c::d -> a   (line 1: crate::a::h)"), "{text}");
    std::fs::remove_dir_all(dir).ok();
}
