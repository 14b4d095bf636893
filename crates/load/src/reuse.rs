//! The session-reuse knob: which connections of a client offer resumption.

/// Decides, connection by connection, whether a client offers a stored
/// session, so that the share of connections the server *resumed* tracks
/// the requested reuse fraction.
///
/// It keeps T (connections whose handshake completed) and R (those the
/// server resumed). A new connection offers a session if and only if one is
/// held and R < reuse × T. With 50 % this gives N R N R …, with 100 %
/// N R R R …, with 0 % N N N …, with 90 % one N in every ten. A resumption
/// the server refuses does not count in R, so the next connection offers
/// again: the achieved ratio is what is steered.
#[derive(Clone, Debug)]
pub struct ReusePlanner {
    /// Requested reuse in parts per million, so the comparison is exact.
    ppm: u64,
    connections: u64,
    resumed: u64,
}

const MILLION: u64 = 1_000_000;

impl ReusePlanner {
    /// A planner for `reuse` (0.0–1.0; values outside are clamped).
    pub fn new(reuse: f64) -> Self {
        let reuse = if reuse.is_nan() {
            0.0
        } else {
            reuse.clamp(0.0, 1.0)
        };
        ReusePlanner {
            ppm: (reuse * MILLION as f64).round() as u64,
            connections: 0,
            resumed: 0,
        }
    }

    /// Returns true if and only if the next connection should offer a
    /// session, given whether one is held.
    pub fn offer(&self, has_session: bool) -> bool {
        has_session && self.resumed * MILLION < self.ppm * self.connections
    }

    /// Counts a completed handshake and whether the server resumed it.
    pub fn record(&mut self, resumed: bool) {
        self.connections += 1;
        self.resumed += u64::from(resumed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first `n` handshakes of a client whose offers are always
    /// accepted: N for full, R for resumed.
    fn sequence(reuse: f64, n: usize) -> String {
        let mut p = ReusePlanner::new(reuse);
        let mut has_session = false;
        let mut out = String::new();
        for _ in 0..n {
            let offer = p.offer(has_session);
            p.record(offer);
            has_session = true;
            out.push(if offer { 'R' } else { 'N' });
        }
        out
    }

    #[test]
    fn documented_sequences() {
        assert_eq!(sequence(0.0, 8), "NNNNNNNN");
        assert_eq!(sequence(0.5, 8), "NRNRNRNR");
        assert_eq!(sequence(1.0, 8), "NRRRRRRR");
        assert_eq!(sequence(0.9, 30), "NRRRRRRRRRNRRRRRRRRRNRRRRRRRRR");
        let s = sequence(0.25, 400);
        assert_eq!(s.matches('R').count(), 100);
    }

    #[test]
    fn refused_offers_are_retried() {
        let mut p = ReusePlanner::new(0.5);
        p.record(false);
        assert!(p.offer(true));
        // The server refused: T = 2, R = 0, so offer again.
        p.record(false);
        assert!(p.offer(true));
        p.record(true);
        assert!(p.offer(true), "R=1 < 0.5 × 3");
        p.record(true);
        assert!(!p.offer(true), "R=2 = 0.5 × 4");
    }

    #[test]
    fn no_session_means_no_offer() {
        let mut p = ReusePlanner::new(1.0);
        p.record(false);
        assert!(!p.offer(false));
        assert!(!ReusePlanner::new(f64::NAN).offer(true));
    }
}
