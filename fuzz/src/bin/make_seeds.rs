//! Writes every fuzz target's seeds (`runnel_fuzz::seeds`) to
//! `fuzz/seeds/TARGET/`, replacing what is there, or with `--check` says
//! whether the files there are what it would write.
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --features seeds --bin make_seeds [-- --check]
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let check = std::env::args().any(|a| a == "--check");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let mut wanted: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for seed in runnel_fuzz::seeds::all() {
        let path = format!("{}/{}", seed.target, seed.name);
        assert!(
            wanted.insert(path.clone(), seed.bytes).is_none(),
            "{path} twice"
        );
    }
    if check {
        let mut found: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for target in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            for file in std::fs::read_dir(target.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = format!(
                    "{}/{}",
                    target.file_name().to_string_lossy(),
                    file.file_name().to_string_lossy()
                );
                found.insert(path, std::fs::read(file.path()).unwrap_or_default());
            }
        }
        if found != wanted {
            eprintln!("fuzz/seeds differs from what make_seeds writes: run it without --check");
            return ExitCode::FAILURE;
        }
        println!("{} seeds are current", wanted.len());
        return ExitCode::SUCCESS;
    }
    let _ = std::fs::remove_dir_all(&root);
    for (path, bytes) in &wanted {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("a target directory")).expect("mkdir");
        std::fs::write(&path, bytes).expect("write a seed");
    }
    println!("wrote {} seeds to {}", wanted.len(), root.display());
    ExitCode::SUCCESS
}
