#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ndarray_ops::fuzz::bound_graph(data);
});
