//! Which kind of path a study's round-trip cell crosses: the relay or the
//! packet-level path ([`super::rtt_path`] runs them).

/// One kind of path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PathKind {
    /// `tlslab relay`: a user-space TCP relay on loopback.
    #[default]
    Relay,
    /// `tlslab path`: packets between two network namespaces.
    Packet,
}

impl PathKind {
    /// The level of the `path` factor: `relay` or `packet`.
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Relay => "relay",
            PathKind::Packet => "packet",
        }
    }

    /// What a cell's point name ends with: nothing for the relay (the
    /// names of runs before `--path`), `-packet` for the packet path.
    pub fn suffix(self) -> &'static str {
        match self {
            PathKind::Relay => "",
            PathKind::Packet => "-packet",
        }
    }
}
