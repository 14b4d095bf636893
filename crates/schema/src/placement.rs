//! Where an experiment's server and client ran: the CPUs each was pinned
//! to, as the lab, breakdown and cluster reports record it.

use serde::{Deserialize, Serialize};

/// The CPU plan of an experiment: the server on one CPU, the client on
/// another, when the process may use at least two.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// CPUs for the server's worker threads (empty: not pinned).
    pub server: Vec<usize>,
    /// CPUs for the load engine's threads (empty: not pinned).
    pub client: Vec<usize>,
}

impl Placement {
    /// A sentence saying where each side ran.
    pub fn describe(&self) -> String {
        if self.server.is_empty() {
            "server and client share the only CPU (not pinned)".into()
        } else {
            format!(
                "server pinned to CPU {:?}, client pinned to CPU {:?}",
                self.server, self.client
            )
        }
    }
}
