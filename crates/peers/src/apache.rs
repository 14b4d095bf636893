//! Apache httpd (mpm_event): one child process with a thread pool, TLS
//! from mod_ssl, every path under one directory, on 127.0.0.1.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The modules the config needs (loaded unless compiled in).
pub const MODULES: [&str; 7] = [
    "mpm_event",
    "authz_core",
    "mime",
    "log_config",
    "socache_shmcb",
    "ssl",
    "unixd",
];

/// An httpd.conf.
#[derive(Clone, Debug)]
pub struct ApacheConf {
    /// ServerRoot: pid, mutexes, error log and session cache live here.
    pub dir: PathBuf,
    /// The port on 127.0.0.1.
    pub port: u16,
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
    /// Document root.
    pub root: PathBuf,
    /// Where the `mod_*.so` files are (Debian: /usr/lib/apache2/modules).
    pub modules: PathBuf,
    /// Modules compiled into this httpd ([`builtin_modules`]): not loaded.
    pub builtin: BTreeSet<String>,
    /// TLS versions, such as `["1.2", "1.3"]`.
    pub versions: Vec<String>,
    /// `SSLSessionTickets`.
    pub tickets: bool,
    /// The thread pool (ThreadsPerChild and MaxRequestWorkers).
    pub threads: usize,
    /// The shmcb session cache, bytes.
    pub cache_bytes: usize,
    /// `SSLCipherSuite` for TLS 1.2, if set.
    pub tls12_ciphers: Option<String>,
    /// `SSLCipherSuite TLSv1.3`, if set.
    pub tls13_suites: Option<String>,
    /// `SSLOpenSSLConfCmd Curves`, if set.
    pub curves: Option<String>,
    /// Access log: (LogFormat, file); none: no access log.
    pub log: Option<(String, PathBuf)>,
    /// `BufferedLogs On`: the access log is written in batches, as `tlslab
    /// serve --access-log` writes its own; false: one `write` per request.
    pub buffered_logs: bool,
}

impl ApacheConf {
    /// The httpd.conf text.
    pub fn render(&self) -> String {
        let d = self.dir.display();
        let root = self.root.display();
        let mut c = format!(
            "# Written by tlslab.\n\
             ServerRoot {d}\n\
             ServerName localhost\n\
             PidFile {d}/httpd.pid\n\
             Mutex file:{d} default\n\
             DefaultRuntimeDir {d}\n\
             ErrorLog {d}/error.log\n\
             LogLevel warn\n"
        );
        for m in MODULES.iter().filter(|m| !self.builtin.contains(**m)) {
            let so = self.modules.join(format!("mod_{m}.so"));
            let _ = writeln!(c, "LoadModule {m}_module {}", so.display());
        }
        let protocols: Vec<String> = self.versions.iter().map(|v| format!("+TLSv{v}")).collect();
        let _ = write!(
            c,
            "User www-data\n\
             Group www-data\n\
             Listen 127.0.0.1:{port} https\n\
             ListenBacklog 4096\n\
             # One child process with a thread pool, on one core (like nginx's one worker).\n\
             StartServers 1\n\
             ServerLimit 1\n\
             ThreadsPerChild {t}\n\
             ThreadLimit {t}\n\
             MinSpareThreads 1\n\
             MaxSpareThreads {t}\n\
             MaxRequestWorkers {t}\n\
             AsyncRequestWorkerFactor 2\n\
             MaxConnectionsPerChild 0\n\
             KeepAlive On\n\
             MaxKeepAliveRequests 0\n\
             KeepAliveTimeout 300\n\
             TypesConfig /dev/null\n",
            port = self.port,
            t = self.threads,
        );
        if let Some((format, file)) = &self.log {
            let _ = writeln!(c, "LogFormat \"{format}\" tlslab");
            let _ = writeln!(c, "CustomLog {} tlslab", file.display());
            if self.buffered_logs {
                c.push_str("BufferedLogs On\n");
            }
        }
        let _ = write!(
            c,
            "DocumentRoot {root}\n\
             <Directory {root}>\n\
             \x20   Require all granted\n\
             </Directory>\n\
             SSLEngine on\n\
             SSLCertificateFile {cert}\n\
             SSLCertificateKeyFile {key}\n\
             SSLProtocol -all {protocols}\n",
            cert = self.cert.display(),
            key = self.key.display(),
            protocols = protocols.join(" "),
        );
        if let Some(s) = &self.tls12_ciphers {
            let _ = writeln!(c, "SSLCipherSuite {s}");
        }
        if let Some(s) = &self.tls13_suites {
            let _ = writeln!(c, "SSLCipherSuite TLSv1.3 {s}");
        }
        if let Some(s) = &self.curves {
            let _ = writeln!(c, "SSLOpenSSLConfCmd Curves {s}");
        }
        let _ = write!(
            c,
            "SSLSessionCache shmcb:{d}/ssl_scache({})\n\
             SSLSessionCacheTimeout 3600\n\
             SSLSessionTickets {}\n",
            self.cache_bytes,
            if self.tickets { "on" } else { "off" },
        );
        c
    }
}

/// The modules compiled into `apache2` (`apache2 -l`): loading them again
/// is an error. Empty if it cannot run.
pub fn builtin_modules(apache2: &Path) -> BTreeSet<String> {
    let Ok(out) = Command::new(apache2).arg("-l").output() else {
        return BTreeSet::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod_")?.strip_suffix(".c"))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf() -> ApacheConf {
        ApacheConf {
            dir: "/d".into(),
            port: 8443,
            cert: "/c".into(),
            key: "/k".into(),
            root: "/www".into(),
            modules: "/mods".into(),
            builtin: ["unixd".to_string()].into(),
            versions: vec!["1.2".into(), "1.3".into()],
            tickets: false,
            threads: 64,
            cache_bytes: 512_000,
            tls12_ciphers: None,
            tls13_suites: None,
            curves: None,
            log: Some(("%k".into(), "/d/access.log".into())),
            buffered_logs: false,
        }
    }

    #[test]
    fn builtin_modules_are_not_loaded_again() {
        let c = conf().render();
        assert!(c.contains("LoadModule ssl_module /mods/mod_ssl.so"), "{c}");
        assert!(!c.contains("unixd_module"));
        assert!(c.contains("Listen 127.0.0.1:8443 https"));
        assert!(c.contains("SSLProtocol -all +TLSv1.2 +TLSv1.3"));
        assert!(c.contains("SSLSessionTickets off"));
        assert!(c.contains("ThreadsPerChild 64"));
        assert!(c.contains("CustomLog /d/access.log tlslab"));
        assert!(!c.contains("BufferedLogs"));
    }

    #[test]
    fn a_buffered_log_is_a_directive() {
        let mut c = conf();
        c.buffered_logs = true;
        assert!(c.render().contains("BufferedLogs On\n"));
    }
}
