//! Records the rustls and aws-lc-rs versions this build links (from the
//! workspace's Cargo.lock), for the environment of `tlslab experiment`'s
//! results document.

fn main() {
    let lock_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock_path.display());
    let lock = std::fs::read_to_string(&lock_path).unwrap_or_default();
    for (name, var) in [
        ("rustls", "TLSLAB_RUSTLS_VERSION"),
        ("aws-lc-rs", "TLSLAB_AWS_LC_RS_VERSION"),
    ] {
        let version = version_of(&lock, name).unwrap_or_else(|| "unknown".into());
        println!("cargo:rustc-env={var}={version}");
    }
}

/// The version of the first `[[package]]` named `name` in a Cargo.lock.
fn version_of(lock: &str, name: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l.trim() == format!("name = \"{name}\"") {
            let v = lines.next()?.trim();
            return v
                .strip_prefix("version = \"")
                .and_then(|v| v.strip_suffix('"'))
                .map(str::to_string);
        }
    }
    None
}
