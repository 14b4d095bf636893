#![no_main]
libfuzzer_sys::fuzz_target!(|d: &[u8]| tlslab_wire::fuzz_entry(d));
