//! Finding a peer's binary, and naming the package that has it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::Error;

/// The Debian package that installs `tool`.
pub fn package(tool: &str) -> &str {
    match tool {
        "h2load" => "nghttp2-client",
        "initdb" | "pg_ctl" | "postgres" => "postgresql",
        "taskset" | "chrt" => "util-linux",
        "ip" => "iproute2",
        "chromium-browser" => "chromium",
        other => other,
    }
}

/// Where `tool` is: on PATH, in /usr/sbin, /usr/local/sbin or /sbin (a
/// non-root PATH often lacks them), or in the newest of Debian's
/// /usr/lib/postgresql/VERSION/bin. Only executable files count.
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
    dirs.extend(postgres_dirs());
    dirs.into_iter()
        .map(|d| d.join(tool))
        .find(|p| is_executable(p))
}

/// [`find_tool`], or an error naming the package to install.
pub fn need_tool(tool: &str) -> Result<PathBuf, Error> {
    find_tool(tool).ok_or_else(|| Error::Missing {
        tool: tool.to_string(),
        package: package(tool).to_string(),
    })
}

/// The first line `path ARGS` prints (stdout, else stderr), such as
/// `nginx version: nginx/1.22.1`; `unknown (why)` if it cannot run.
pub fn tool_version(path: &Path, args: &[&str]) -> String {
    Command::new(path)
        .args(args)
        .output()
        .map(|o| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines().next().unwrap_or("").trim().to_string()
        })
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// /usr/lib/postgresql/*/bin, newest version first.
fn postgres_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0));
    dirs.into_iter().map(|(_, d)| d).collect()
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_names_its_package() {
        assert!(find_tool("sh").is_some());
        let err = need_tool("tlslab-no-such-tool").unwrap_err().to_string();
        assert!(
            err.contains("apt-get install -y tlslab-no-such-tool"),
            "{err}"
        );
        assert_eq!(package("h2load"), "nghttp2-client");
        assert_eq!(package("initdb"), "postgresql");
        assert!(tool_version(Path::new("/nonexistent"), &[]).starts_with("unknown"));
    }
}
