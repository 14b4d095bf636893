//! A phase of a probe that failed: its error class and message (a
//! [`crate::sample::Sample`]'s `error_kind` and `error`). Both the round and the
//! body counter produce it.

/// A phase that failed: its class and message.
pub(crate) struct Failed(pub(crate) String, pub(crate) String);
