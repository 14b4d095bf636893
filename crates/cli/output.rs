//! Output files named by flags: checked before any work, written after.
//! A leaf: it imports nothing from the other files of the binary.

use std::path::Path;

use anyhow::Context;

use crate::usage::bail;

/// Checks every output file named by a flag (`(flag, path)`), before any
/// work: its directory must exist and it must not be a directory, so a typo
/// in `--json` fails at start (exit 2) rather than after a run whose results
/// would then be lost.
pub fn check(files: &[(&str, Option<&std::path::PathBuf>)]) -> anyhow::Result<()> {
    for (flag, path) in files {
        let Some(path) = path else { continue };
        if path.is_dir() {
            return bail(format!(
                "{flag} {}: is a directory; give a file name",
                path.display()
            ));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return bail(format!(
                "{flag} {}: the directory {} does not exist; create it (mkdir -p {}) or give another path",
                path.display(),
                dir.display(),
                dir.display()
            ));
        }
    }
    Ok(())
}

/// Writes `value` as pretty-printed JSON to `path`.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let body = serde_json::to_vec_pretty(value)?;
    std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))
}

/// Prints a command's text report and writes its JSON to `--json FILE`.
pub fn print_and_save(
    text: &str,
    report: &impl serde::Serialize,
    json: Option<&Path>,
) -> anyhow::Result<std::process::ExitCode> {
    print!("{text}");
    if let Some(path) = json {
        write_json(path, report)?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The key log of `--keylog FILE`, or of `SSLKEYLOGFILE` when the flag is
/// not given (as curl honours it).
pub fn key_log(flag: Option<&std::path::PathBuf>) -> Option<std::path::PathBuf> {
    tlslab_crypto::keylog::path_from(flag.map(|p| p.as_path()))
}

/// The warning a run with a key log prints before it starts: the file
/// holds secrets that decrypt every connection of the run.
pub fn warn_key_log(path: Option<&Path>) {
    if let Some(p) = path {
        eprintln!(
            "tlslab: WARNING: TLS key log {} (--keylog or {}): it holds the secrets of every \
             connection of this run; anyone who reads it can decrypt their captures. Delete it \
             when done.",
            p.display(),
            tlslab_crypto::keylog::ENV
        );
    }
}
