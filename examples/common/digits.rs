//! The digits data set (UCI optical digits, 1,797 8x8 images, values 0..16), committed in
//! `data/digits.csv.gz`, with a fixed seeded 80/20 train/test split.

use std::io::Read;

/// Images as rows of 64 features scaled to [0, 1], and their labels.
pub struct Split {
    pub x: Vec<f32>,
    pub y: Vec<f32>,
    pub n: usize,
}

pub const FEATURES: usize = 64;
pub const CLASSES: usize = 10;

/// Loads and splits the data set (`seed` fixes the shuffle).
pub fn load(seed: u64) -> Result<(Split, Split), String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/digits.csv.gz");
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open {path}: {e}"))?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot decompress {path}: {e}"))?;
    let mut rows: Vec<(Vec<f32>, f32)> = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let vals: Vec<f32> = line
            .split(',')
            .map(|v| {
                v.trim()
                    .parse::<f32>()
                    .map_err(|e| format!("{path} line {}: {v:?}: {e}", i + 1))
            })
            .collect::<Result<_, _>>()?;
        if vals.len() != FEATURES + 1 {
            return Err(format!(
                "{path} line {}: {} values, expected {}",
                i + 1,
                vals.len(),
                FEATURES + 1
            ));
        }
        rows.push((
            vals[..FEATURES].iter().map(|v| v / 16.0).collect(),
            vals[FEATURES],
        ));
    }
    // Fisher-Yates with a small fixed generator, so the split never depends on a crate version.
    let mut s = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    for i in (1..rows.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        rows.swap(i, (s % (i as u64 + 1)) as usize);
    }
    let cut = rows.len() * 4 / 5;
    let pack = |part: &[(Vec<f32>, f32)]| Split {
        x: part.iter().flat_map(|(x, _)| x.iter().copied()).collect(),
        y: part.iter().map(|(_, y)| *y).collect(),
        n: part.len(),
    };
    Ok((pack(&rows[..cut]), pack(&rows[cut..])))
}
