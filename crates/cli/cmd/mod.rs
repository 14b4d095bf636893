//! Step two: each subcommand's flags into its engine's configuration (the
//! builder: no I/O but reading small files the flags name), then the run
//! step (certificates generated, logs read, the engine started).
//! A command imports `args`, the leaves and `flags` (the flag groups
//! several commands share), and, still, three others that do not import
//! it back: `sweep` builds on `load`, `load` on `distributed` (its agent
//! directory), `tools` on `load` (reading an access log).

pub mod dispatch;
pub mod distributed;
pub mod experiment;
pub mod h3;
pub mod lab;
pub mod load;
pub mod path;
pub mod peers;
pub mod probe;
pub mod report;
pub mod serve;
pub mod sweep;
pub mod tools;
