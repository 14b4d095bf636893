//! A PostgreSQL server of its own: `initdb` in a temporary directory and
//! `pg_ctl` on a free 127.0.0.1 port, as the unprivileged user `nobody`
//! when run as root (initdb refuses root), stopped on drop.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use crate::error::Error;
use crate::proc::free_port;
use crate::tool::need_tool;

/// `nobody`: who runs PostgreSQL when this process is root.
const UNPRIVILEGED: u32 = 65534;

/// A running PostgreSQL (user `probe`, trust authentication), stopped
/// (immediately) on drop.
pub struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

/// Whether this process runs as root (the owner of /proc/self).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Runs as the unprivileged user when root, from /tmp (the server user
/// may not be able to enter the working directory).
fn as_server_user(cmd: &mut Command) -> &mut Command {
    if is_root() {
        cmd.uid(UNPRIVILEGED).gid(UNPRIVILEGED).current_dir("/tmp");
    }
    cmd
}

fn run(what: &str, cmd: &mut Command) -> Result<(), Error> {
    let out = cmd.output().map_err(|source| Error::Spawn {
        name: what.to_string(),
        source,
    })?;
    if out.status.success() {
        return Ok(());
    }
    Err(Error::Command {
        what: what.to_string(),
        output: format!(
            "{}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    })
}

impl Postgres {
    /// Finds `initdb` and `pg_ctl` (PATH or /usr/lib/postgresql/*/bin),
    /// makes a cluster and starts it.
    pub fn start() -> Result<Postgres, Error> {
        let initdb = need_tool("initdb")?;
        let bin = initdb.parent().map(PathBuf::from).unwrap_or_default();
        let io = |what, path: &std::path::Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { what, path, source }
        };
        // Under /tmp when root, whatever TMPDIR says: the server user must
        // be able to reach the data directory through every parent.
        let tmp = if is_root() {
            PathBuf::from("/tmp")
        } else {
            std::env::temp_dir()
        };
        let dir = tempfile::Builder::new()
            .prefix("tlslab-pg-")
            .tempdir_in(&tmp)
            .map_err(io("cannot create a directory in", &tmp))?;
        let data = dir.path().join("data");
        std::fs::create_dir(&data).map_err(io("cannot create", &data))?;
        if is_root() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
                .map_err(io("cannot chmod", dir.path()))?;
            std::os::unix::fs::chown(&data, Some(UNPRIVILEGED), Some(UNPRIVILEGED))
                .map_err(io("cannot chown", &data))?;
        }
        run(
            "initdb",
            as_server_user(Command::new(&initdb).arg("-D").arg(&data).args([
                "-U",
                "probe",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ])),
        )?;
        let port = free_port().map_err(io("cannot bind", std::path::Path::new("127.0.0.1:0")))?;
        let pg = Postgres {
            bin,
            data,
            port,
            _dir: dir,
        };
        pg.pg_ctl_start()?;
        Ok(pg)
    }

    /// `pg_ctl start` (again, after [`stop`](Postgres::stop)), waiting up
    /// to 30 s; an error carries the server log.
    pub fn pg_ctl_start(&self) -> Result<(), Error> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.data.display()
        );
        let log = self.data.join("server.log");
        run(
            "pg_ctl start",
            as_server_user(
                Command::new(self.bin.join("pg_ctl"))
                    .arg("-D")
                    .arg(&self.data)
                    .args(["-o", &opts, "-l"])
                    .arg(&log)
                    .args(["-w", "-t", "30", "start"]),
            ),
        )
        .map_err(|e| match e {
            Error::Command { what, output } => Error::Command {
                what,
                output: format!(
                    "{output}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ),
            },
            other => other,
        })
    }

    /// Stops it at once (`pg_ctl stop -m immediate`).
    pub fn stop(&self) {
        let _ = as_server_user(
            Command::new(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(&self.data)
                .args(["-m", "immediate", "-w", "-t", "30", "stop"]),
        )
        .output();
    }

    /// `postgres://probe@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://probe@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}
