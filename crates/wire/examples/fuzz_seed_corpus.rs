//! Writes the real rustls handshakes the wire tests use as a cargo-fuzz
//! seed corpus, in `fuzz/corpus/wire/`:
//! `cargo run -p tlslab-wire --example fuzz_seed_corpus`.

#[path = "../tests/support/mod.rs"]
mod support;

fn main() -> std::io::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/wire");
    std::fs::create_dir_all(&dir)?;
    let corpus = support::corpus();
    for (i, item) in corpus.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), item)?;
    }
    println!("wrote {} seeds to {}", corpus.len(), dir.display());
    Ok(())
}
