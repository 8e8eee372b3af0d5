//! The runtime every input loads into: made once per process, with a 64 MiB memory limit so
//! that a file asking for more is refused by the limit, not by the machine.

use std::sync::{Arc, OnceLock};

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::Runtime;
use storage::StorageConfig;

pub fn runtime() -> &'static Arc<Runtime> {
    static RT: OnceLock<Arc<Runtime>> = OnceLock::new();
    RT.get_or_init(|| {
        let storage = StorageConfig {
            default_limit: Some(64 << 20),
            ..StorageConfig::default()
        };
        let engine = EngineBuilder::new(EngineKind::ThreadedPerDevice)
            .cpu_workers(1)
            .build();
        Runtime::new(engine, storage)
    })
}
