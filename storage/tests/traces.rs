//! The committed traces, their generators, the format and replay.

use storage::{Context, PoolKind, StorageManager, Trace, TraceEvent};

const TRAINING: &str = include_str!("../traces/training.trace");
const STRESS: &str = include_str!("../traces/stress.trace");

fn header(name: &str, what: &str) -> String {
    format!("# {name}: {what}\n# format: 'a <id> <bytes>' allocates, 'f <id>' frees. Regenerate: MXRS_WRITE_TRACES=1 cargo test -p storage --test traces\n")
}

#[test]
fn committed_traces_match_their_generators() {
    let training = Trace::synthetic_training(4);
    let stress = Trace::synthetic_stress(6000, 7);
    if std::env::var_os("MXRS_WRITE_TRACES").is_some() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/traces");
        std::fs::write(
            format!("{dir}/training.trace"),
            header(
                "training",
                "4 steps of a ResNet-like forward+backward at batch 32",
            ) + &training.to_string(),
        )
        .unwrap();
        std::fs::write(
            format!("{dir}/stress.trace"),
            header("stress", "adversarial sizes and lifetimes, seed 7") + &stress.to_string(),
        )
        .unwrap();
        return;
    }
    assert_eq!(TRAINING.parse::<Trace>().unwrap(), training);
    assert_eq!(STRESS.parse::<Trace>().unwrap(), stress);
}

#[test]
fn traces_round_trip_through_text() {
    let t = Trace::synthetic_stress(500, 1);
    assert_eq!(t.to_string().parse::<Trace>().unwrap(), t);
}

#[test]
fn malformed_traces_name_the_line() {
    for (text, line, needle) in [
        ("a 1 10\nx 2\n", 2, "expected"),
        ("a 1 10\na 1 20\n", 2, "allocated again"),
        ("f 3\n", 1, "not live"),
        ("# c\na one 5\n", 2, "not a non-negative integer"),
        ("a 1 -4\n", 1, "not a non-negative integer"),
    ] {
        let e = text.parse::<Trace>().unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("trace line {line}:")) && msg.contains(needle),
            "{msg}"
        );
    }
}

#[test]
fn replay_reports_peaks_and_fragmentation() {
    let t: Trace = TRAINING.parse().unwrap();
    let peak = t.peak_live_bytes();
    for kind in PoolKind::ALL {
        let m = StorageManager::new(Context::cpu(0), kind);
        let r = t.replay(&m).unwrap();
        assert_eq!(r.peak_requested, peak, "{kind:?}");
        assert!(r.peak_reserved >= r.peak_in_use && r.peak_in_use >= r.peak_requested);
        assert!(r.fragmentation >= 1.0);
        println!(
            "{:<14} fragmentation {:.3}  peak reserved {}",
            kind.name(),
            r.fragmentation,
            r.peak_reserved
        );
        if kind == PoolKind::Bfc {
            assert!(
                r.fragmentation <= 1.15,
                "bfc fragmentation {:.3} on the training trace",
                r.fragmentation
            );
        }
        assert_eq!(m.stats().in_use, 0);
    }
}

#[test]
fn managers_record_traces_that_replay_identically() {
    let m = StorageManager::new(Context::cpu(0), PoolKind::PooledExact);
    m.start_trace();
    let a = m.alloc(100).unwrap();
    let b = m.alloc(5000).unwrap();
    drop(a);
    let c = m.alloc(64).unwrap();
    drop((b, c));
    let t = m.take_trace().unwrap();
    assert_eq!(t.events.len(), 6);
    assert_eq!(t.events[0], TraceEvent::Alloc { id: 0, bytes: 100 });
    assert_eq!(t.events[2], TraceEvent::Free { id: 0 });
    let again = t.to_string().parse::<Trace>().unwrap();
    assert_eq!(again, t);
    assert!(m.take_trace().is_none());
}
