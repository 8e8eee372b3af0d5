//! A disk cache for the kernels' PTX, so that NVRTC compiles the kernels once per machine
//! instead of once per process (0.7–2 s of every GPU program's start; CuPy, Triton and
//! PyTorch's JIT keep such caches too).
//!
//! An entry is named by a hash of everything the PTX depends on (the source, the NVRTC version,
//! the compile options) and is only used when it holds every kernel; anything else — a missing,
//! truncated or foreign file, a directory that cannot be written — falls back to compiling, so
//! the cache can make start-up faster but never makes a program fail. Entries are written to a
//! temporary file and renamed into place, so concurrent processes never read half an entry.
//!
//! Where: `MXRS_KERNEL_CACHE` (a directory; `off` turns the cache off), else
//! `$XDG_CACHE_HOME/mxrs`, else `$HOME/.cache/mxrs`.

// Only the `cuda` build compiles PTX; the tests exercise the cache with a stand-in compiler.
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use std::path::{Path, PathBuf};

/// The variable naming the cache directory.
pub(crate) const ENV: &str = "MXRS_KERNEL_CACHE";

/// The cache directory the environment asks for, or `None` when it is off or there is no home.
pub(crate) fn dir_from(lookup: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| lookup(k).filter(|v| !v.is_empty());
    match set(ENV) {
        Some(v) if v.eq_ignore_ascii_case("off") || v == "0" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => set("XDG_CACHE_HOME")
            .map(|d| PathBuf::from(d).join("mxrs"))
            .or_else(|| set("HOME").map(|h| PathBuf::from(h).join(".cache").join("mxrs"))),
    }
}

/// FNV-1a over `parts` (each followed by a separator): stable across Rust releases and
/// platforms, unlike the standard hasher, so an entry stays valid as long as its inputs do.
pub(crate) fn key(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain(&[0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn entry(dir: &Path, key: u64) -> PathBuf {
    dir.join(format!("kernels-{key:016x}.ptx"))
}

/// The PTX under `key` in `dir` if it is there and `valid`; otherwise `compile`'s, stored there
/// for the next process (when `dir` can be written; when not, it is simply not stored).
pub(crate) fn cached(
    dir: Option<&Path>,
    key: u64,
    valid: impl Fn(&str) -> bool,
    compile: impl FnOnce() -> Result<String, String>,
) -> Result<String, String> {
    let Some(dir) = dir else { return compile() };
    let path = entry(dir, key);
    if let Ok(text) = std::fs::read_to_string(&path) {
        if valid(&text) {
            return Ok(text);
        }
    }
    let ptx = compile()?;
    let _ = store(dir, &path, &ptx);
    Ok(ptx)
}

fn store(dir: &Path, path: &Path, ptx: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("ptx.{}.tmp", std::process::id()));
    std::fs::write(&tmp, ptx)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("mxrs-ptx-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// A miss compiles and stores; a hit compiles nothing and gives back what was stored; an
    /// entry that is not valid is compiled again and replaced.
    #[test]
    fn a_second_process_reads_what_the_first_compiled() {
        let dir = scratch("hit");
        let compiles = Cell::new(0);
        let compile = |text: &'static str| {
            let compiles = &compiles;
            move || {
                compiles.set(compiles.get() + 1);
                Ok(text.to_string())
            }
        };
        let valid = |t: &str| t.starts_with(".entry");
        let k = key(&[b"source", b"12.9"]);
        let first = cached(Some(&dir), k, valid, compile(".entry a")).unwrap();
        let second = cached(Some(&dir), k, valid, compile(".entry b")).unwrap();
        assert_eq!((first.as_str(), second.as_str()), (".entry a", ".entry a"));
        assert_eq!(compiles.get(), 1);
        // Another key is another entry.
        let other = cached(Some(&dir), k + 1, valid, compile(".entry c")).unwrap();
        assert_eq!((other.as_str(), compiles.get()), (".entry c", 2));
        // A truncated entry is not used: compiled again, and the entry is whole again.
        std::fs::write(entry(&dir, k), ".ent").unwrap();
        let again = cached(Some(&dir), k, valid, compile(".entry d")).unwrap();
        assert_eq!((again.as_str(), compiles.get()), (".entry d", 3));
        assert_eq!(std::fs::read_to_string(entry(&dir, k)).unwrap(), ".entry d");
        let leftovers = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .count();
        assert_eq!(leftovers, 0);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A cache that cannot be written, or none at all, still gives the compiled PTX, and a
    /// failed compile is reported as it is.
    #[test]
    fn without_a_usable_cache_it_compiles() {
        let file = scratch("file");
        std::fs::write(&file, "not a directory").unwrap();
        let got = cached(Some(&file), 1, |_| true, || Ok("ptx".into())).unwrap();
        assert_eq!(got, "ptx");
        assert_eq!(
            cached(None, 1, |_| true, || Ok("ptx".into())).unwrap(),
            "ptx"
        );
        let err = cached(None, 1, |_| true, || Err("NVRTC rejected it".into())).unwrap_err();
        assert_eq!(err, "NVRTC rejected it");
        std::fs::remove_file(&file).ok();
    }

    #[test]
    fn the_directory_follows_the_environment() {
        let env = storage::lookup_in;
        let home = env(&[("HOME", "/home/u")]);
        assert_eq!(dir_from(home), Some("/home/u/.cache/mxrs".into()));
        let xdg = env(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/c")]);
        assert_eq!(dir_from(xdg), Some("/c/mxrs".into()));
        let own = env(&[("HOME", "/home/u"), (ENV, "/k")]);
        assert_eq!(dir_from(own), Some("/k".into()));
        assert_eq!(dir_from(env(&[("HOME", "/home/u"), (ENV, "off")])), None);
        assert_eq!(dir_from(env(&[])), None);
    }

    /// The key changes with any input, and with where one input ends and the next begins.
    #[test]
    fn keys_tell_inputs_apart() {
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert_ne!(key(&[b"src", b"12.8"]), key(&[b"src", b"12.9"]));
        assert_eq!(key(&[b"src", b"12.9"]), key(&[b"src", b"12.9"]));
    }
}
