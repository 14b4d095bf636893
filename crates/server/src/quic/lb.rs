//! `serve --h3 --quic-lb CONFIG`: QUIC-LB connection IDs
//! (draft-ietf-quic-load-balancers-21) through quinn's
//! [`quinn::ConnectionIdGenerator`], so that a balancer sharing the
//! configuration (`tlslab dispatch --udp --quic-lb`) reads this node's
//! server ID out of every connection ID the node chooses, whatever
//! address the client sends from. The encodings are
//! `tlslab_crypto::quic::lb`'s: plaintext, one AES-128 block, or the
//! four-pass Feistel network.

use std::time::Duration;

use quinn::{ConnectionId, ConnectionIdGenerator};
use quinn_proto::InvalidCid;
use tlslab_crypto::quic::{CidIssuer, LbConfig};

/// One endpoint's QUIC-LB connection ID source.
#[derive(Debug)]
pub(crate) struct LbCids {
    issuer: CidIssuer,
}

impl LbCids {
    /// The generator of `config`'s connection IDs.
    pub(crate) fn new(config: &LbConfig) -> Self {
        LbCids {
            issuer: CidIssuer::new(config),
        }
    }
}

impl ConnectionIdGenerator for LbCids {
    fn generate_cid(&mut self) -> ConnectionId {
        ConnectionId::new(self.issuer.issue().as_bytes())
    }

    /// A short-header packet whose DCID does not decode to this server's
    /// ID is dropped by quinn without a stateless reset: it was meant for
    /// another node (a balancer's fallback sent it here).
    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        if self.issuer.is_ours(cid) {
            Ok(())
        } else {
            Err(InvalidCid)
        }
    }

    fn cid_len(&self) -> usize {
        self.issuer.codec().params().cid_len()
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_issues_cids_that_decode_to_the_server_id() {
        for cfg in [
            "server-id=0a0b,nonce-len=6,config-id=1",
            "server-id=0a0b0c,nonce-len=13,config-id=2,key=8f95f09245765f80256934e50c66207f",
            "server-id=0a0b,nonce-len=8,config-id=0,key=8f95f09245765f80256934e50c66207f",
        ] {
            let c = LbConfig::parse(cfg).unwrap();
            let mut g = LbCids::new(&c);
            let a = g.generate_cid();
            let b = g.generate_cid();
            assert_ne!(a, b, "{cfg}");
            assert_eq!(a.len(), g.cid_len(), "{cfg}");
            assert_eq!(a[0] >> 5, c.params.config_id, "{cfg}");
            assert!(g.validate(&a).is_ok() && g.validate(&b).is_ok(), "{cfg}");
            let codec = g.issuer.codec();
            assert_eq!(
                codec.server_id(&a).unwrap().as_bytes(),
                c.server_id,
                "{cfg}"
            );
            // Another server's CID under the same configuration is not ours.
            let mut other = c.clone();
            other.server_id[0] ^= 0xff;
            let theirs = LbCids::new(&other).generate_cid();
            assert!(g.validate(&theirs).is_err(), "{cfg}");
        }
    }
}
