//! The engine's layers, checked: every file of `src/` belongs to a layer,
//! and imports only from its own layer and the layers below it (see
//! `docs/engine-layers.md`):
//!
//! ```text
//!          facade            lib.rs (`mod` and `pub use` only), sim_support.rs
//!         /      \
//!    cluster      node       cluster/, placement/ | node.rs, local.rs
//!       |           |        (never importing each other)
//!   consensus       |        raft/
//!         \        /
//!           base             api error datadir config upkeep clock metrics/
//!                            tail activity checkpoint copy_forward view recent_pages tier/
//!                            history control hooks
//! ```
//!
//! Std only. Each file is lexed (comments, strings and `$crate` skipped);
//! every `crate::`, `super::` and `self::` path, in `use` groups or in
//! code, is expanded and resolved to the file that holds it (`super` and
//! `self` through the file's module and any inline `mod` it is in; a
//! `crate::Name` through lib.rs's `pub use` lines). The check fails on an
//! import against the layers' direction, a file in no layer, and an item
//! defined in lib.rs. Its self-tests run it on in-memory sources, among
//! them the real tree with a cycle added on purpose.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    Base,
    Consensus,
    Cluster,
    Node,
    Facade,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Base => "base",
            Layer::Consensus => "consensus",
            Layer::Cluster => "cluster",
            Layer::Node => "node",
            Layer::Facade => "facade",
        })
    }
}

/// Which layer each file is in: a file's path relative to `src/`, or a
/// directory prefix (ending in `/`) for every file under it.
const LAYERS: &[(&str, Layer)] = &[
    ("lib.rs", Layer::Facade),
    ("sim_support.rs", Layer::Facade),
    ("api.rs", Layer::Base),
    ("error.rs", Layer::Base),
    ("datadir.rs", Layer::Base),
    ("config.rs", Layer::Base),
    ("upkeep.rs", Layer::Base),
    ("clock.rs", Layer::Base),
    ("metrics/", Layer::Base),
    ("tail.rs", Layer::Base),
    ("activity.rs", Layer::Base),
    ("checkpoint.rs", Layer::Base),
    ("copy_forward.rs", Layer::Base),
    ("view.rs", Layer::Base),
    ("recent_pages.rs", Layer::Base),
    ("tier/", Layer::Base),
    ("history.rs", Layer::Base),
    ("control.rs", Layer::Base),
    ("hooks.rs", Layer::Base),
    ("raft/", Layer::Consensus),
    ("cluster/", Layer::Cluster),
    ("placement/", Layer::Cluster),
    ("node.rs", Layer::Node),
    ("local.rs", Layer::Node),
];

/// Whether a file of layer `from` may import from layer `to`.
fn may_import(from: Layer, to: Layer) -> bool {
    use Layer::*;
    match from {
        Facade => true,
        Cluster => matches!(to, Cluster | Consensus | Base),
        Node => matches!(to, Node | Base),
        Consensus => matches!(to, Consensus | Base),
        Base => to == Base,
    }
}

fn layer_of(file: &str) -> Option<Layer> {
    LAYERS
        .iter()
        .find(|(at, _)| {
            if at.ends_with('/') {
                file.starts_with(at)
            } else {
                file == *at
            }
        })
        .map(|(_, layer)| *layer)
}

// ---- Lexing ----

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    /// `$crate` (a macro's path to its own crate: never an import here).
    DollarCrate,
    PathSep,
    Punct(char),
}

/// The tokens of `source` that paths are made of; comments, string and
/// character literals, lifetimes and numbers are dropped.
fn lex(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        match c {
            _ if c.is_whitespace() => i += 1,
            '/' if at(i + 1) == '/' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if at(i + 1) == '*' => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && at(i + 1) == '*' {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && at(i + 1) == '/' {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            '"' => i = skip_string(&chars, i + 1),
            'r' | 'b' | 'c' if raw_or_byte_string(&chars, i).is_some() => {
                i = raw_or_byte_string(&chars, i).expect("checked");
            }
            '\'' => {
                if at(i + 1) == '\\' {
                    // An escaped character literal.
                    i += 2;
                    while i < chars.len() && chars[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                } else if at(i + 2) == '\'' {
                    i += 3; // 'x'
                } else {
                    i += 1; // a lifetime: its name is lexed as an identifier
                }
            }
            '$' if chars[i + 1..].starts_with(&['c', 'r', 'a', 't', 'e']) => {
                tokens.push(Token::DollarCrate);
                i += 6;
            }
            ':' if at(i + 1) == ':' => {
                tokens.push(Token::PathSep);
                i += 2;
            }
            _ if c.is_ascii_digit() => {
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
            _ if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let ident: String = chars[start..i].iter().collect();
                // A raw identifier (`r#match`) is its name.
                if ident == "r" && at(i) == '#' && (at(i + 1).is_alphabetic() || at(i + 1) == '_') {
                    continue;
                }
                tokens.push(Token::Ident(ident));
            }
            '#' => i += 1,
            _ => {
                tokens.push(Token::Punct(c));
                i += 1;
            }
        }
    }
    tokens
}

/// Skips a string's body from `i` (just after its opening quote); answers
/// the index after its closing quote.
fn skip_string(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// If a raw, byte or C string starts at `i` (`r"..."`, `r#"..."#`,
/// `b"..."`, `br"..."`, `c"..."`, ...), the index after it.
fn raw_or_byte_string(chars: &[char], i: usize) -> Option<usize> {
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    // Not the end of an identifier (`bar"` cannot happen, but `xr` can).
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if matches!(at(j), 'b' | 'c') {
        j += 1;
    }
    let raw = at(j) == 'r';
    if raw {
        j += 1;
    }
    if !raw {
        return (j > i && at(j) == '"').then(|| skip_string(chars, j + 1));
    }
    let hashes = chars[j..].iter().take_while(|c| **c == '#').count();
    if at(j + hashes) != '"' {
        return None;
    }
    let closing: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', hashes))
        .collect();
    let mut k = j + hashes + 1;
    while k < chars.len() {
        if chars[k..].starts_with(&closing) {
            return Some(k + closing.len());
        }
        k += 1;
    }
    Some(k)
}

// ---- Paths ----

/// A path as written: its segments, with `self` inside a `use` group
/// already joined to the group's prefix, and whether it ends in a glob.
type Written = Vec<String>;

/// Reads the path starting at token `i` (an identifier), expanding `{..}`
/// groups; answers every full path and the index after the path.
fn read_path(tokens: &[Token], mut i: usize, prefix: &[String]) -> (Vec<Written>, usize) {
    let mut segments = prefix.to_vec();
    loop {
        match tokens.get(i) {
            Some(Token::Ident(name)) if name == "self" && !segments.is_empty() => i += 1,
            Some(Token::Ident(name)) => {
                segments.push(name.clone());
                i += 1;
            }
            Some(Token::Punct('{')) => return read_group(tokens, i + 1, &segments),
            Some(Token::Punct('*')) => return (vec![segments], i + 1),
            _ => return (vec![segments], i),
        }
        if tokens.get(i) != Some(&Token::PathSep) {
            // `x as y`: the alias names nothing new.
            if tokens.get(i) == Some(&Token::Ident("as".into())) {
                i += 2;
            }
            return (vec![segments], i);
        }
        i += 1;
    }
}

/// Reads a `use` group's items after its `{`.
fn read_group(tokens: &[Token], mut i: usize, prefix: &[String]) -> (Vec<Written>, usize) {
    let mut all = Vec::new();
    while i < tokens.len() {
        match &tokens[i] {
            Token::Punct('}') => return (all, i + 1),
            Token::Punct(',') => i += 1,
            _ => {
                let (paths, next) = read_path(tokens, i, prefix);
                all.extend(paths);
                i = next.max(i + 1);
            }
        }
    }
    (all, i)
}

/// Every `crate::`, `super::` and `self::` path in `tokens`, each with
/// the inline modules it is written in (innermost last).
fn paths(tokens: &[Token]) -> Vec<(Vec<String>, Written)> {
    let mut found = Vec::new();
    // Inline modules open around this point: (name, brace depth inside).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            Token::Ident(kw) if kw == "mod" => {
                if let (Some(Token::Ident(name)), Some(Token::Punct('{'))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    inline.push((name.clone(), depth + 1));
                }
            }
            Token::Ident(start)
                if matches!(start.as_str(), "crate" | "super" | "self")
                    && tokens.get(i + 1) == Some(&Token::PathSep) =>
            {
                let (written, next) = read_path(tokens, i, &[]);
                let modules: Vec<String> = inline.iter().map(|(name, _)| name.clone()).collect();
                found.extend(written.into_iter().map(|w| (modules.clone(), w)));
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

// ---- The tree ----

/// A source tree: each file's path relative to `src/` and its text.
type Sources = BTreeMap<String, String>;

/// The module path a file declares (`raft/transport/mod.rs` is
/// `raft::transport`, `lib.rs` the crate root).
fn module_of(file: &str) -> Vec<String> {
    let module = match file.rsplit_once('/') {
        _ if file == "lib.rs" || file == "mod.rs" => "",
        Some((dir, "mod.rs")) => dir,
        _ => file.strip_suffix(".rs").unwrap_or(file),
    };
    module
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The file that holds the module `path`, or the longest prefix of it
/// that is a file's module (the rest is items and inline modules).
fn file_of(sources: &Sources, path: &[String]) -> String {
    (0..=path.len())
        .rev()
        .find_map(|k| {
            let dir = path[..k].join("/");
            [format!("{dir}.rs"), format!("{dir}/mod.rs")]
                .into_iter()
                .find(|f| sources.contains_key(f))
        })
        .unwrap_or_else(|| "lib.rs".into())
}

/// lib.rs's `pub use` lines: each name it exports to the path (from the
/// crate root) of what it names. Paths into other crates are left out.
fn reexports(sources: &Sources) -> BTreeMap<String, Vec<String>> {
    let tokens = lex(sources.get("lib.rs").map_or("", String::as_str));
    let mut names = BTreeMap::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == Token::Ident("use".into()) {
            let (written, next) = read_path(&tokens, i + 1, &[]);
            for path in written {
                let local = path
                    .first()
                    .is_some_and(|m| file_of(sources, &path[..1]) != "lib.rs" || m == "crate");
                if let (true, Some(last)) = (local, path.last()) {
                    names.insert(last.clone(), path.clone());
                }
            }
            i = next;
        } else {
            i += 1;
        }
    }
    names
}

/// Every violation of the layers in `sources`, one line each.
fn check(sources: &Sources) -> Vec<String> {
    let mut violations = Vec::new();
    let exported = reexports(sources);
    for (file, text) in sources {
        let Some(layer) = layer_of(file) else {
            violations.push(format!("{file} is in no layer"));
            continue;
        };
        let tokens = lex(text);
        if file == "lib.rs" {
            for token in &tokens {
                if let Token::Ident(word) = token {
                    let item = [
                        "fn",
                        "struct",
                        "enum",
                        "trait",
                        "impl",
                        "const",
                        "static",
                        "type",
                        "union",
                        "macro_rules",
                    ];
                    if item.contains(&word.as_str()) {
                        violations.push(format!(
                            "lib.rs defines an item (`{word}`): it holds `mod` and `pub use` \
                             lines only"
                        ));
                    }
                }
            }
        }
        for (inline, written) in paths(&tokens) {
            let mut here = module_of(file);
            here.extend(inline);
            let Some(target) = resolve(&here, &written, &exported) else {
                violations.push(format!(
                    "{file}: `{}` climbs above the crate",
                    written.join("::")
                ));
                continue;
            };
            let to_file = file_of(sources, &target);
            let Some(to) = layer_of(&to_file) else {
                continue; // reported for that file
            };
            if !may_import(layer, to) {
                violations.push(format!(
                    "{file}: {layer} may not import {to} (`{}`, in {to_file})",
                    written.join("::")
                ));
            }
        }
    }
    violations
}

/// The module path (from the crate root) `written` names, written in the
/// module `here`; `crate::Name` goes through lib.rs's re-exports.
fn resolve(
    here: &[String],
    written: &[String],
    exported: &BTreeMap<String, Vec<String>>,
) -> Option<Vec<String>> {
    let mut module = here.to_vec();
    let mut rest = written;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            module.clear();
            rest = &rest[1..];
            if let Some(target) = rest.first().and_then(|name| exported.get(name)) {
                let mut path = target.clone();
                path.extend(rest[1..].iter().cloned());
                return Some(path);
            }
        }
        Some("self") => rest = &rest[1..],
        _ => {
            while rest.first().map(String::as_str) == Some("super") {
                module.pop()?;
                rest = &rest[1..];
            }
        }
    }
    module.extend(rest.iter().cloned());
    Some(module)
}

fn load(dir: &Path, under: &str, sources: &mut Sources) {
    for entry in std::fs::read_dir(dir).expect("a readable src/") {
        let entry = entry.expect("a directory entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if path.is_dir() {
            load(&path, &format!("{under}{name}/"), sources);
        } else if name.ends_with(".rs") {
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            sources.insert(format!("{under}{name}"), text);
        }
    }
}

fn the_tree() -> Sources {
    let mut sources = Sources::new();
    load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        "",
        &mut sources,
    );
    sources
}

#[test]
fn the_engine_imports_only_down_its_layers() {
    let sources = the_tree();
    assert!(sources.len() > 50, "found only {} files", sources.len());
    let violations = check(&sources);
    assert!(violations.is_empty(), "\n{}", violations.join("\n"));
}

#[test]
fn a_cycle_added_on_purpose_is_caught() {
    let mut sources = the_tree();
    let journal = sources.get_mut("raft/journal.rs").expect("raft/journal.rs");
    journal.push_str("\nuse crate::cluster::hosting::Hosting;\n");
    let violations = check(&sources);
    assert_eq!(violations.len(), 1, "{violations:#?}");
    assert!(
        violations[0].contains("raft/journal.rs: consensus may not import cluster"),
        "{violations:#?}"
    );
}

fn tree(files: &[(&str, &str)]) -> Sources {
    files
        .iter()
        .map(|(path, text)| (path.to_string(), text.to_string()))
        .collect()
}

#[test]
fn super_self_groups_and_reexports_are_resolved() {
    let lib = "mod api;\nmod raft;\nmod cluster;\nmod node;\npub use api::Thing;\n";
    let base = "pub struct Thing;\n";
    // Each line reaches cluster from consensus another way.
    for import in [
        "use crate::cluster::Policy;",
        "use crate::{api::Thing, cluster::{self, Policy}};",
        "use super::cluster::Policy;",
        "mod inner { use super::super::cluster; }",
        "fn f() { let _ = crate::cluster::policy(); }",
    ] {
        let sources = tree(&[
            ("lib.rs", lib),
            ("api.rs", base),
            ("raft/mod.rs", import),
            ("cluster/mod.rs", "use crate::raft; use crate::Thing;"),
            ("node.rs", "use crate::api::Thing;"),
        ]);
        let violations = check(&sources);
        assert!(!violations.is_empty(), "{import}: not caught");
        assert!(
            violations
                .iter()
                .all(|v| v.starts_with("raft/mod.rs: consensus may not import cluster")),
            "{import}: {violations:#?}"
        );
    }
    // `crate::Thing` is base (re-exported from api), `self::` and a
    // same-layer `super::` are fine.
    let sources = tree(&[
        ("lib.rs", lib),
        ("api.rs", base),
        (
            "raft/mod.rs",
            "use crate::Thing; mod group; use self::group::G;",
        ),
        ("raft/group.rs", "use super::G; pub struct G;"),
    ]);
    assert_eq!(check(&sources), Vec::<String>::new());
}

#[test]
fn comments_strings_and_dollar_crate_are_not_imports() {
    let sources = tree(&[
        ("lib.rs", "mod api;\nmod raft;\nmod cluster;\n"),
        (
            "api.rs",
            r##"
            // use crate::cluster::X;
            /* use crate::cluster::X; /* nested */ use crate::raft::Y; */
            /// [`crate::cluster::X`]
            const A: &str = "use crate::cluster::X;";
            const B: &str = r#"crate::raft::Y "quoted""#;
            const C: char = '"';
            fn f<'a>(x: &'a str) -> &'a str { x }
            macro_rules! m { () => { $crate::cluster::X } }
            "##,
        ),
        ("raft/mod.rs", ""),
        ("cluster/mod.rs", ""),
    ]);
    assert_eq!(check(&sources), Vec::<String>::new());
}

#[test]
fn a_node_importing_the_cluster_is_caught_both_ways() {
    let sources = tree(&[
        ("lib.rs", "mod node;\nmod cluster;\n"),
        ("node.rs", "use crate::cluster::ClusterNode;"),
        ("cluster/mod.rs", "use crate::node::Node;"),
    ]);
    let violations = check(&sources);
    assert!(
        violations
            .iter()
            .any(|v| v.contains("node may not import cluster")),
        "{violations:#?}"
    );
    assert!(
        violations
            .iter()
            .any(|v| v.contains("cluster may not import node")),
        "{violations:#?}"
    );
}

#[test]
fn a_file_in_no_layer_and_an_item_in_lib_rs_are_caught() {
    let sources = tree(&[
        ("lib.rs", "mod stray;\npub fn helper() {}\n"),
        ("stray.rs", ""),
    ]);
    let violations = check(&sources);
    assert!(
        violations.contains(&"stray.rs is in no layer".to_string()),
        "{violations:#?}"
    );
    assert!(
        violations
            .iter()
            .any(|v| v.contains("lib.rs defines an item")),
        "{violations:#?}"
    );
}
