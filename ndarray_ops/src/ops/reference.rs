//! `docs/ops.md`: the op reference, generated from the registry so that it cannot drift from
//! it. A unit test compares the file with what the registry gives and fails when they differ;
//! `MXRS_WRITE_OPS_MD=1 cargo test -p ndarray_ops --lib ops_reference` writes it anew.
//! (A unit test, because only the crate's own tests see the GPU back end's kernel table without
//! the `cuda` feature.)

use super::{registry, Arity, OpDef};

/// The reference as Markdown: a table with one row per op (aliases on its row), its inputs,
/// in-place pairs, whether the symbolic gradient pass has a rule for it and whether
/// `has_gpu_kernel` says the GPU back end runs it; then, per op, its attributes with their type,
/// default and meaning.
pub(super) fn markdown(has_gpu_kernel: impl Fn(&OpDef) -> bool) -> String {
    let reg = registry();
    let mut defs: Vec<&OpDef> = reg
        .iter()
        .filter(|(name, def)| **name == def.name)
        .map(|(_, def)| *def)
        .collect();
    defs.sort_by_key(|d| d.name);
    let mut out = String::from(
        "# Op reference\n\n\
         Generated from the op registry (`ndarray_ops/src/ops/reference.rs`; \
         `MXRS_WRITE_OPS_MD=1 cargo test -p ndarray_ops --lib ops_reference` writes it, and the \
         test fails when this file is stale). One row per registered op, under its MXNet name; \
         aliases are the other names it answers to, older MXNet names included. \
         Inputs are named as MXNet names them (`...`: any number); in-place lists the \
         (input, output) pairs that may share memory; gradient says whether the symbolic gradient \
         pass (and so autograd) differentiates it; GPU whether the CUDA back end has a kernel for \
         it. Backward ops carry their forward node's attributes and are called by the gradient \
         pass, not by users; fused ops (`_fused_*`) carry their members' attributes and are made \
         by the fusion pass at bind, on the CPU.\n\n\
         The attributes of each op follow the table: the ones MXNet 1.9.1 accepts for it, with \
         MXNet's types and defaults. An attribute outside them, a required one left out or a value \
         of the wrong type is refused before the op runs.\n\n",
    );
    out.push_str(&format!("{} ops, {} names.\n\n", defs.len(), reg.len()));
    out.push_str("| op | aliases | inputs | in-place | gradient | GPU |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    let code = |v: &[&str]| {
        v.iter()
            .map(|a| format!("`{a}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let yes = |b: bool| if b { "yes" } else { "" };
    for def in &defs {
        let mut aliases: Vec<&str> = reg
            .iter()
            .filter(|(name, d)| std::ptr::eq(**d, *def) && **name != def.name)
            .map(|(name, _)| *name)
            .collect();
        aliases.sort_unstable();
        let inputs = match (def.signature(), def.arity) {
            (Some(sig), _) if sig.variadic => format!("{}...", code(sig.inputs)),
            (Some(sig), _) if !sig.inputs.is_empty() => code(sig.inputs),
            (_, Arity::Exactly(n)) => n.to_string(),
            (_, Arity::AtLeast(n)) => format!("{n} or more"),
        };
        let inplace: Vec<String> = def
            .inplace
            .iter()
            .map(|(i, o)| format!("{i}→{o}"))
            .collect();
        out.push_str(&format!(
            "| `{}` | {} | {inputs} | {} | {} | {} |\n",
            def.name,
            code(&aliases),
            inplace.join(", "),
            yes(def.gradient.is_some()),
            yes(has_gpu_kernel(def)),
        ));
    }
    out.push_str("\n## Attributes\n");
    for def in defs {
        let Some(sig) = def.signature().filter(|s| !s.attrs.is_empty()) else {
            continue;
        };
        out.push_str(&format!(
            "\n### `{}`\n\n| attribute | type | default | meaning |\n|---|---|---|---|\n",
            def.name
        ));
        for a in sig.attrs {
            let ty = super::signature::taken(def.name, a);
            let ty = match a.or_none {
                true => format!("{ty} or None"),
                false => ty.to_string(),
            };
            let default = match a.default {
                None => "required".to_string(),
                Some("") => "(empty)".to_string(),
                Some(d) => format!("`{d}`"),
            };
            out.push_str(&format!(
                "| `{}` | {ty} | {default} | {} |\n",
                a.name,
                super::signature::doc(def.name, a.name)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::markdown;

    #[test]
    fn ops_reference_in_docs_is_what_the_registry_gives() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ops.md");
        let fresh = markdown(|def| def.gpu.is_some());
        if std::env::var_os("MXRS_WRITE_OPS_MD").is_some() {
            std::fs::write(path, &fresh).unwrap();
            return;
        }
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == fresh,
            "docs/ops.md is stale: write it anew with \
             MXRS_WRITE_OPS_MD=1 cargo test -p ndarray_ops --lib ops_reference"
        );
    }
}
