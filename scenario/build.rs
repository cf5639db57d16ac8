//! Embeds every scenario file under `scenarios/` into the binary, so `twin` runs the
//! default scenario and resolves names like `gb300` from any working directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    collect_ext(dir, out, &["toml", "csv", "json"]);
}

fn collect_ext(dir: &Path, out: &mut Vec<PathBuf>, exts: &[&str]) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect_ext(&p, out, exts);
        } else if p.extension().is_some_and(|e| exts.iter().any(|x| e == *x)) {
            out.push(p);
        }
    }
}

/// A static list `name` of `(path under root, macro!(file))` for `files`.
fn list(code: &mut String, root: &Path, files: &[PathBuf], name: &str, ty: &str, mac: &str) {
    writeln!(code, "pub static {name}: &[(&str, {ty})] = &[").unwrap();
    for f in files {
        println!("cargo:rerun-if-changed={}", f.display());
        let rel = f
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        writeln!(
            code,
            "    ({rel:?}, {mac}!({:?})),",
            f.display().to_string()
        )
        .unwrap();
    }
    code.push_str("];\n");
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../scenarios");
    println!("cargo:rerun-if-changed=../scenarios");
    let mut files = Vec::new();
    collect(&root, &mut files);
    let mut code = String::new();
    list(&mut code, &root, &files, "FILES", "&str", "include_str");
    // Compressed files (the kernel-table profiles), as bytes.
    let mut blobs = Vec::new();
    collect_ext(&root, &mut blobs, &["gz"]);
    list(&mut code, &root, &blobs, "BLOBS", "&[u8]", "include_bytes");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("embedded_scenarios.rs");
    std::fs::write(out, code).unwrap();
}
