//! Value parsers the examples' command lines share (clap calls them on each value, and prints
//! what they return as the error, with the flag it belongs to).

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use engine::EngineKind;

/// A count that must be at least 1 (iterations, epochs, batch sizes, context counts).
pub fn positive(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("expected a positive whole number, found {v:?}")),
    }
}

/// An engine by any of the names `MXRS_ENGINE` takes.
pub fn engine_kind(v: &str) -> Result<EngineKind, String> {
    EngineKind::parse(v).ok_or_else(|| {
        let known = EngineKind::ALL.map(EngineKind::name).join(", ");
        format!("unknown engine {v:?} (known: {known})")
    })
}

/// One input's shape, `name=d0,d1,...`.
pub fn shape(spec: &str) -> Result<(String, Vec<usize>), String> {
    let (name, dims) = spec
        .split_once('=')
        .filter(|(name, _)| !name.is_empty())
        .ok_or(format!("{spec:?}: expected name=d0,d1,..."))?;
    let dims = dims
        .split(',')
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .map_err(|e| format!("{spec:?}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    Ok((name.to_string(), dims))
}

/// The `--shape` values by input name, refusing a name given twice.
pub fn shapes(given: Vec<(String, Vec<usize>)>) -> Result<HashMap<String, Vec<usize>>, String> {
    let mut shapes = HashMap::new();
    for (name, dims) in given {
        match shapes.entry(name) {
            Entry::Occupied(e) => {
                let name = e.key();
                return Err(format!(
                    "--shape {name}={dims:?}: '{name}' was already given as {:?}",
                    e.get()
                ));
            }
            Entry::Vacant(e) => {
                e.insert(dims);
            }
        }
    }
    Ok(shapes)
}
