#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vramkit_fuzz::targets::json(data));
