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

/// A recomputation setting, as `MXRS_BACKWARD_MIRROR` takes it (`800M`, `auto`, `cheap`, `off`).
pub fn mirror(v: &str) -> Result<ndarray_ops::symbol::mirror::Mirror, String> {
    v.parse()
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

/// A map of input names to shapes.
pub type Shapes = HashMap<String, Vec<usize>>;

/// The input shapes in the `*-shapes.json` file beside a `*-symbol.json` graph (how the shared
/// model graphs ship theirs), with that file's path: `None` when there is no such file (what to
/// do then is the caller's: some graphs carry their own shapes), an error naming the file when
/// it cannot be read or is not a map of input names to shapes.
pub fn sidecar_shapes(graph: &str) -> Result<(String, Option<Shapes>), String> {
    let Some(stem) = graph.strip_suffix("-symbol.json") else {
        return Ok((format!("{graph} (not a *-symbol.json name)"), None));
    };
    let side = format!("{stem}-shapes.json");
    let text = match std::fs::read_to_string(&side) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((side, None)),
        Err(e) => return Err(format!("cannot read {side}: {e}")),
    };
    let shapes = serde_json::from_str(&text).map_err(|e| format!("{side}: {e}"))?;
    Ok((side, Some(shapes)))
}

/// The shapes given with `--shape`, else those of the `*-shapes.json` file beside the graph;
/// with neither, none (the graph's own `__shape__` attributes are all there is).
pub fn given_or_sidecar(graph: &str, given: &[(String, Vec<usize>)]) -> Result<Shapes, String> {
    if !given.is_empty() {
        return shapes(given.to_vec());
    }
    Ok(sidecar_shapes(graph)?.1.unwrap_or_default())
}

/// Runs an example's body; its error is printed as `name: error` and the process exits with 1.
pub fn run_or_exit(name: &str, run: impl FnOnce() -> Result<(), String>) {
    if let Err(e) = run() {
        eprintln!("{name}: {e}");
        std::process::exit(1);
    }
}
