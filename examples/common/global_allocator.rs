//! Makes mimalloc, through its plain API, the example's global allocator (see `allocator.rs`
//! for why the plain API): an example includes this one module.

#[path = "allocator.rs"]
mod allocator;

#[global_allocator]
static GLOBAL: allocator::PlainMiMalloc = allocator::PlainMiMalloc;
