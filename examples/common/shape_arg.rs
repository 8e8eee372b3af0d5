//! The `--shape name=d0,d1,...` argument of the model examples.

use std::collections::HashMap;

/// Parses `name=d0,d1,...` into `shapes`, refusing a name given twice.
pub fn add_shape(shapes: &mut HashMap<String, Vec<usize>>, spec: &str) -> Result<(), String> {
    let (name, dims) = spec
        .split_once('=')
        .ok_or(format!("--shape {spec:?}: expected name=d0,d1,..."))?;
    let dims = dims
        .split(',')
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .map_err(|e| format!("--shape {spec:?}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    if let Some(before) = shapes.insert(name.to_string(), dims) {
        return Err(format!(
            "--shape {spec:?}: '{name}' was already given as {before:?}"
        ));
    }
    Ok(())
}
