//! Fuzzes the dispatcher's handshake inspection: ClientHello routing keys
//! and the server-reply learner (`tlslab_dispatch::fuzz_entry`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tlslab_dispatch::fuzz_entry(data);
});
