//! `docs/ops.md`: the op reference, generated from the registry so that it cannot drift from
//! it. A unit test compares the file with what the registry gives and fails when they differ;
//! `MXRS_WRITE_OPS_MD=1 cargo test -p ndarray_ops --lib ops_reference` writes it anew.
//! (A unit test, because only the crate's own tests see the GPU back end's kernel table without
//! the `cuda` feature.)

use super::{registry, Arity, OpDef};

/// The reference as Markdown: one row per op (aliases on its row), with its inputs, the
/// attributes MXNet 1.9.1 gives it, its in-place pairs, whether the symbolic gradient pass has
/// a rule for it and whether `has_gpu_kernel` says the GPU back end runs it.
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
         Attributes are the ones MXNet 1.9.1 accepts for the op (a name outside them is refused); \
         in-place lists the (input, output) pairs that may share memory; gradient says whether \
         the symbolic gradient pass (and so autograd) differentiates it; GPU whether the CUDA back \
         end has a kernel for it.\n\n",
    );
    out.push_str(&format!("{} ops, {} names.\n\n", defs.len(), reg.len()));
    out.push_str("| op | aliases | inputs | attributes | in-place | gradient | GPU |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for def in defs {
        let mut aliases: Vec<&str> = reg
            .iter()
            .filter(|(name, d)| std::ptr::eq(**d, def) && **name != def.name)
            .map(|(name, _)| *name)
            .collect();
        aliases.sort_unstable();
        let inputs = match def.arity {
            Arity::Exactly(n) => n.to_string(),
            Arity::AtLeast(n) => format!("{n} or more"),
        };
        let attrs = match super::mxnet_params::MXNET_PARAMS
            .binary_search_by(|(name, _)| (*name).cmp(def.name))
        {
            Ok(i) => super::mxnet_params::MXNET_PARAMS[i].1.join(", "),
            Err(_) => "(not an MXNet op)".to_string(),
        };
        let inplace: Vec<String> = def
            .inplace
            .iter()
            .map(|(i, o)| format!("{i}→{o}"))
            .collect();
        let gradient = match crate::symbol::has_gradient_rule(def.name) {
            true => "yes",
            false => "",
        };
        let gpu = match has_gpu_kernel(def) {
            true => "yes",
            false => "",
        };
        let code = |v: &[&str]| {
            v.iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            "| `{}` | {} | {inputs} | {attrs} | {} | {gradient} | {gpu} |\n",
            def.name,
            code(&aliases),
            inplace.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::markdown;

    #[test]
    fn ops_reference_in_docs_is_what_the_registry_gives() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ops.md");
        let fresh = markdown(|def| crate::gpu::ops::kernel_for(def).is_some());
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
