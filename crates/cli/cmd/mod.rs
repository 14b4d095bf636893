//! Step two: each subcommand's flags into its engine's configuration (the
//! builder: no I/O but reading small files the flags name), then the run
//! step (certificates generated, logs read, the engine started).
//! A command imports `args`, the leaves and `flags` (the flag groups
//! several commands share: `load`'s plan, which `sweep` and `fileset`
//! build on too, its distributed agent, and the HTTP/3 flags), never
//! another command.

pub mod dispatch;
pub mod distributed;
pub mod experiment;
pub mod lab;
pub mod load;
pub mod path;
pub mod peers;
pub mod probe;
pub mod report;
pub mod serve;
pub mod sweep;
pub mod tools;
