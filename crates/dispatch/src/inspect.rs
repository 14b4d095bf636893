//! What the dispatcher reads from each direction of a handshake, using
//! `tlslab-wire`: the resumption keys a ClientHello offers, and what the
//! server's cleartext answer teaches (the session ID it issued, the PSK it
//! accepted, the TLS 1.2 ticket it sent).

use tlslab_wire::{
    ClientHello, ContentType, HandshakeType, NewSessionTicket, RECORD_HEADER_LEN, Reassembler,
    ServerHello, parse_record_header, version,
};

use crate::table::{Key, KeyKind};

/// The routing keys of one ClientHello, in the order the `session` policy
/// tries them.
#[derive(Clone, Debug, Default)]
pub struct Offer {
    /// The TLS 1.2 session ID (may be a TLS 1.3 compatibility echo).
    pub session_id: Option<Key>,
    /// The TLS 1.2 ticket's key name.
    pub ticket: Option<Key>,
    /// The key names of the offered TLS 1.3 PSK identities, in order.
    pub psks: Vec<Option<Key>>,
    /// The offered session ID bytes (to tell a TLS 1.2 resumption from a
    /// full handshake in the ServerHello).
    pub session_id_bytes: Vec<u8>,
    /// Whether the hello is a resumption attempt: a PSK, a non-empty
    /// ticket, or a session ID from a client that does not offer TLS 1.3.
    pub attempt: bool,
}

impl Offer {
    /// Reads the keys of a parsed ClientHello.
    pub fn of(ch: &ClientHello<'_>) -> Offer {
        let psks: Vec<Option<Key>> = ch
            .pre_shared_key
            .map(|p| {
                p.identities
                    .iter()
                    .map(|i| Key::ticket(i.identity))
                    .collect()
            })
            .unwrap_or_default();
        let ticket = ch.session_ticket.and_then(Key::ticket);
        let attempt = !psks.is_empty()
            || ticket.is_some()
            || (!ch.session_id.is_empty() && !ch.offers_tls13());
        Offer {
            session_id: Key::new(KeyKind::SessionId, ch.session_id),
            ticket,
            psks,
            session_id_bytes: ch.session_id.to_vec(),
            attempt,
        }
    }

    /// Every key, in routing order: session ID, TLS 1.2 ticket, PSKs.
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.session_id
            .iter()
            .chain(self.ticket.iter())
            .chain(self.psks.iter().flatten())
    }
}

/// What the server's side of a handshake showed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Learned {
    /// Whether a ServerHello (not a HelloRetryRequest) was seen.
    pub server_hello: bool,
    /// Whether the server resumed the offered session (TLS 1.2: it echoed
    /// the offered session ID; TLS 1.3: it selected a PSK).
    pub resumed: bool,
    /// Keys that now map to this node.
    pub keys: Vec<Key>,
}

/// Bytes a learner buffers at most: one record.
const MAX_RECORD: usize = RECORD_HEADER_LEN + 16384 + 2048;
/// Server bytes inspected at most before learning stops.
const MAX_INSPECT: usize = 256 * 1024;

/// Follows the server→client bytes of one connection until the handshake
/// turns opaque (ChangeCipherSpec or application data), and collects what
/// they teach. Memory is bounded by one record.
pub struct ServerLearner {
    buf: Vec<u8>,
    reasm: Reassembler,
    offer: Offer,
    seen: usize,
    done: bool,
    tls13: bool,
    /// What was learned so far.
    pub learned: Learned,
}

impl ServerLearner {
    /// A learner for a connection whose ClientHello offered `offer`.
    pub fn new(offer: Offer) -> ServerLearner {
        ServerLearner {
            buf: Vec::new(),
            reasm: Reassembler::new(),
            offer,
            seen: 0,
            done: false,
            tls13: false,
            learned: Learned::default(),
        }
    }

    /// Whether the ClientHello was a resumption attempt.
    pub fn offer_attempt(&self) -> bool {
        self.offer.attempt
    }

    /// Whether learning has stopped (nothing more to read in cleartext).
    pub fn done(&self) -> bool {
        self.done
    }

    /// Feeds the next server bytes.
    pub fn feed(&mut self, data: &[u8]) {
        if self.done {
            return;
        }
        self.seen += data.len();
        if self.seen > MAX_INSPECT {
            self.done = true;
            return;
        }
        self.buf.extend_from_slice(data);
        let mut at = 0;
        while !self.done {
            let rest = &self.buf[at..];
            let Ok(h) = parse_record_header(rest) else {
                // Incomplete header, or not TLS: wait or give up.
                if rest.len() >= RECORD_HEADER_LEN {
                    self.done = true;
                }
                break;
            };
            let len = h.record_len();
            if len > MAX_RECORD {
                self.done = true;
                break;
            }
            if rest.len() < len {
                break;
            }
            let payload = rest[RECORD_HEADER_LEN..len].to_vec();
            at += len;
            if h.content_type != ContentType::HANDSHAKE {
                // ChangeCipherSpec, alert or application data: the rest is
                // encrypted (an alert ends the handshake anyway).
                self.done = true;
                break;
            }
            self.handshake_payload(&payload);
        }
        self.buf.drain(..at.min(self.buf.len()));
        if self.done {
            self.buf = Vec::new();
        }
    }

    fn handshake_payload(&mut self, payload: &[u8]) {
        if self.reasm.push(payload).is_err() {
            self.done = true;
            return;
        }
        loop {
            let msg = match self.reasm.next_message() {
                Ok(Some(m)) => (m.msg_type, m.body.to_vec()),
                Ok(None) => return,
                Err(_) => {
                    self.done = true;
                    return;
                }
            };
            self.message(msg.0, &msg.1);
            if self.done {
                return;
            }
        }
    }

    fn message(&mut self, typ: HandshakeType, body: &[u8]) {
        if typ == HandshakeType::SERVER_HELLO {
            let Ok(sh) = ServerHello::parse_body(body) else {
                self.done = true;
                return;
            };
            if sh.is_hello_retry_request {
                return;
            }
            self.learned.server_hello = true;
            if sh.version() == version::TLS13 {
                self.tls13 = true;
                if let Some(i) = sh.pre_shared_key {
                    self.learned.resumed = true;
                    if let Some(Some(k)) = self.offer.psks.get(usize::from(i)) {
                        self.learned.keys.push(*k);
                    }
                }
                // Everything after the TLS 1.3 ServerHello is encrypted.
                self.done = true;
            } else if !sh.session_id.is_empty() {
                if sh.session_id == self.offer.session_id_bytes.as_slice() {
                    self.learned.resumed = true;
                } else if let Some(k) = Key::new(KeyKind::SessionId, sh.session_id) {
                    self.learned.keys.push(k);
                }
            }
        } else if typ == HandshakeType::NEW_SESSION_TICKET && !self.tls13 {
            if let Ok(t) = NewSessionTicket::parse_body(body)
                && let Some(k) = Key::ticket(t.ticket)
            {
                self.learned.keys.push(k);
            }
        } else if typ == HandshakeType::SERVER_HELLO_DONE || typ == HandshakeType::FINISHED {
            // ServerHelloDone: the rest of the server's first flight is
            // done; a NewSessionTicket only follows the client's reply, so
            // keep going. Finished would be encrypted; stop defensively.
            if typ == HandshakeType::FINISHED {
                self.done = true;
            }
        }
    }
}
