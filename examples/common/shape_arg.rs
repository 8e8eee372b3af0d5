//! The `--shape name=d0,d1,...` argument of the model examples.

/// Parses `name=d0,d1,...` into the name and its dimensions.
pub fn parse_shape(spec: &str) -> Result<(String, Vec<usize>), String> {
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
    Ok((name.to_string(), dims))
}
