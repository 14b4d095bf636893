//! The outside programs tlslab measures itself against or leans on —
//! nginx, Apache, HAProxy, redis-server, PostgreSQL and Chromium — in one
//! place, for `tlslab-experiment`, the tests (as a dev-dependency) and the
//! benchmarks (through the hidden `tlslab peers` subcommand):
//!
//! - [`find_tool`] / [`need_tool`]: a binary on PATH, in the sbin
//!   directories or in Debian's `/usr/lib/postgresql/*/bin`; the error
//!   names the apt package to install.
//! - [`Proc`]: a started peer in a process group of its own, its output in
//!   a file, waited for until its port accepts (bounded), pinned with
//!   `sched_setaffinity` ([`tlslab_runtime::CpuPin`]), metered (CPU time
//!   and RSS summed over its process tree), and killed with its group on
//!   drop. [`start_on_free_port`] retries on a port taken meanwhile.
//! - Config builders: [`nginx::NginxConf`], [`apache::ApacheConf`],
//!   [`haproxy::HaproxyConf`], and starters for [`redis::Redis`],
//!   [`postgres::Postgres`] (initdb/pg_ctl, as an unprivileged user when
//!   root) and [`chromium`] (headless flags).
//!
//! Every peer listens on 127.0.0.1 only. This crate parses no peer's
//! output beyond what starting it needs: access logs belong to their
//! readers.

pub mod apache;
pub mod chromium;
mod error;
pub mod haproxy;
pub mod nginx;
pub mod postgres;
mod proc;
pub mod redis;
mod tool;

pub use error::Error;
pub use proc::{
    Finished, Proc, free_port, rss_kib, start_on_free_port, wait_for_port, wait_timeout,
};
pub use tool::{find_tool, need_tool, package, tool_version};
