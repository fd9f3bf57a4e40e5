//! The shim rule: `src/sync.rs` is the only file in `src/` that names the
//! atomics, so that `--features loom` swaps every one of them for loom's.
//!
//! A file that imported `std::sync::atomic` (or `core::`'s, or loom's)
//! directly would keep using real atomics under loom, and the models would
//! silently stop checking it. This test walks `src/` and fails on any code
//! outside `src/sync.rs` that names a `sync::atomic` path, spelled out
//! (`std::sync::atomic::AtomicU64`) or grouped (`std::sync::{atomic::…}`).
//! Comments are skipped: documentation may show a user's own clock built
//! on std atomics, which is not crate code.

use std::fs;
use std::path::{Path, PathBuf};

/// The one file allowed to name the atomics, relative to the crate root.
const SHIM: &str = "src/sync.rs";

/// `source` with its `//` and `/* */` comments blanked out.
fn strip_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            // To the end of the line, keeping the newline.
            rest = after.find('\n').map_or("", |at| &after[at..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |at| &after[at + 2..]);
            out.push(' ');
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Where `source` names a `sync::atomic` path (or `portable_atomic`), as
/// 1-based line numbers.
fn atomic_paths(source: &str) -> Vec<usize> {
    let code = strip_comments(source);
    // Whitespace may sit anywhere in a path: `std :: sync :: { atomic }`.
    let line_of = |byte: usize| code[..byte].matches('\n').count() + 1;
    let mut squashed = String::new();
    let mut lines = Vec::new();
    for (at, c) in code.char_indices() {
        if !c.is_whitespace() {
            squashed.push(c);
            lines.push(line_of(at));
        }
    }
    let mut found = Vec::new();
    for (at, _) in squashed.match_indices("sync::atomic") {
        found.push(lines[at]);
    }
    // The 128-bit atomic of a two-limit client comes from this crate.
    for (at, _) in squashed.match_indices("portable_atomic") {
        found.push(lines[at]);
    }
    for (at, _) in squashed.match_indices("sync::{") {
        let group = &squashed[at + "sync::{".len()..];
        // The group up to its matching brace.
        let mut depth = 1;
        let end = group
            .char_indices()
            .find(|&(_, c)| {
                depth += i32::from(c == '{') - i32::from(c == '}');
                depth == 0
            })
            .map_or(group.len(), |(end, _)| end);
        if group[..end]
            .split(|c| "{},:".contains(c))
            .any(|part| part == "atomic")
        {
            found.push(lines[at]);
        }
    }
    found.sort_unstable();
    found.dedup();
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn only_the_shim_names_the_atomics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 1, "found no sources under src/");
    let shim = root.join(SHIM);
    assert!(files.contains(&shim), "{SHIM} is missing");

    let offenders: Vec<String> = files
        .iter()
        .filter(|path| **path != shim)
        .flat_map(|path| {
            let lines = atomic_paths(&fs::read_to_string(path).unwrap());
            let shown = path.strip_prefix(root).unwrap().display().to_string();
            lines.into_iter().map(move |line| format!("{shown}:{line}"))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "only {SHIM} may name `sync::atomic`; take atomics from `crate::sync` instead:\n  {}",
        offenders.join("\n  ")
    );
}

#[test]
fn the_shim_is_where_the_atomics_are() {
    // Guards the test itself: the detector must see the shim's own imports.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shim = fs::read_to_string(root.join(SHIM)).unwrap();
    assert!(!atomic_paths(&shim).is_empty());
}

#[test]
fn the_detector_sees_every_spelling_and_skips_comments() {
    assert_eq!(atomic_paths("use std::sync::atomic::AtomicU64;"), [1]);
    assert_eq!(
        atomic_paths("\nuse core::sync::atomic::{AtomicU64, Ordering};"),
        [2]
    );
    assert_eq!(
        atomic_paths("use std::sync::{\n    atomic::AtomicU64,\n    Arc,\n};"),
        [1]
    );
    assert_eq!(atomic_paths("use std::sync::{Arc, atomic};"), [1]);
    assert_eq!(
        atomic_paths("let x = std :: sync\n :: atomic :: AtomicU64::new(0);"),
        [1]
    );
    assert_eq!(atomic_paths("use loom::sync::atomic::AtomicU64;"), [1]);
    assert_eq!(atomic_paths("use portable_atomic::AtomicU128;"), [1]);
    assert_eq!(atomic_paths("x: portable_atomic :: AtomicU128,"), [1]);
    assert!(atomic_paths("use std::sync::Arc;").is_empty());
    assert!(atomic_paths("use crate::sync::{Arc, AtomicU64, Ordering};").is_empty());
    assert!(atomic_paths("use std::sync::{Arc, Mutex};").is_empty());
    assert!(
        atomic_paths("/// std::sync::atomic::AtomicU64\n//! std::sync::atomic\nfn f() {}")
            .is_empty()
    );
    assert!(atomic_paths("/* use std::sync::atomic::AtomicU64; */ fn f() {}").is_empty());
}
