#![no_main]

#[path = "runtime.rs"]
mod runtime;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ndarray_ops::fuzz::attributes(runtime::runtime(), data);
});
