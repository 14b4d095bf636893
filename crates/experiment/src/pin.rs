//! Which CPUs the server and the client get.

use tlslab_runtime::allowed_cpus;

/// The CPU plan of an experiment: the server on one CPU, the client on
/// another, when the process may use at least two (the default: neither
/// pinned).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    /// CPUs for the server's worker threads (empty: not pinned).
    pub server: Vec<usize>,
    /// CPUs for the load engine's threads (empty: not pinned).
    pub client: Vec<usize>,
}

impl Placement {
    /// Splits the CPUs this process may use: the first for the server, the
    /// second for the client. With a single CPU nothing is pinned.
    pub fn split() -> Placement {
        let cpus = allowed_cpus();
        if cpus.len() >= 2 {
            Placement {
                server: vec![cpus[0]],
                client: vec![cpus[1]],
            }
        } else {
            Placement::default()
        }
    }

    /// A sentence saying where each side ran.
    pub fn describe(&self) -> String {
        self.to_schema().describe()
    }

    /// `taskset -c 0,1 ` for `cpus`, to prefix a command line; nothing when
    /// not pinned.
    pub(crate) fn taskset(cpus: &[usize]) -> String {
        if cpus.is_empty() {
            String::new()
        } else {
            format!("taskset -c {} ", crate::join(cpus, ","))
        }
    }

    /// The placement as the reports record it.
    pub fn to_schema(&self) -> tlslab_schema::placement::Placement {
        tlslab_schema::placement::Placement {
            server: self.server.clone(),
            client: self.client.clone(),
        }
    }
}
