//! A damaged checkpoint is refused, naming what is damaged: a byte of the header, a bit of
//! a field's values, or a header no keisan wrote (an array twice, no history).

mod common;

use std::path::Path;

use common::keisan_in;

const PROBLEM: &str = "solver = \"jacobi\"\n[jacobi]\nn = 16\nm = 16\nmax_iterations = 40\n\
                       relax = 0.5\ntolerance = 1e-30\n";

/// A checkpoint of step 20 in `dir`/res.
fn checkpoint(dir: &Path) -> Vec<u8> {
    std::fs::write(dir.join("p.toml"), PROBLEM).unwrap();
    let o = keisan_in(
        dir,
        &[
            "run",
            "p.toml",
            "--backend",
            "cpu",
            "-q",
            "--out",
            "res",
            "--checkpoint-every",
            "20",
            "--set",
            "jacobi.max_iterations=20",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read(dir.join("res/checkpoint.keisan")).unwrap()
}

/// Restart from `bytes`; the exit code and stderr.
fn restart(dir: &Path, bytes: &[u8]) -> (i32, String) {
    std::fs::write(dir.join("c.keisan"), bytes).unwrap();
    let o = keisan_in(
        dir,
        &[
            "run",
            "--restart",
            "c.keisan",
            "--backend",
            "cpu",
            "-q",
            "--set",
            "jacobi.max_iterations=40",
        ],
    );
    (
        o.status.code().unwrap(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The header's JSON and where the data start.
fn split(bytes: &[u8]) -> (serde_json::Value, usize) {
    let n = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    (
        serde_json::from_slice(&bytes[16..16 + n]).unwrap(),
        16 + n + 32,
    )
}

/// `header` in place of the file's, with a checksum that matches it (a header made by
/// hand by someone who knows the format).
fn with_header(bytes: &[u8], header: &serde_json::Value) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let (_, data) = split(bytes);
    let json = serde_json::to_vec(header).unwrap();
    let mut out = b"KEISANCK".to_vec();
    out.extend((json.len() as u64).to_le_bytes());
    out.extend(&json);
    out.extend(Sha256::digest(&json));
    out.extend(&bytes[data..]);
    out
}

#[test]
fn damaged_checkpoints_are_refused_naming_what_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let good = checkpoint(dir.path());
    let (code, err) = restart(dir.path(), &good);
    assert_eq!(code, 0, "the undamaged checkpoint restarts: {err}");

    // "step":20 -> "step":23 in the header.
    let at = good
        .windows(9)
        .position(|w| w == b"\"step\":20")
        .expect("the step in the header")
        + 8;
    let mut b = good.clone();
    b[at] = b'3';
    let (code, err) = restart(dir.path(), &b);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("header does not match its checksum"), "{err}");

    // One mantissa bit of the field's first value.
    let (_, data) = split(&good);
    let mut b = good.clone();
    b[data] ^= 1;
    let (code, err) = restart(dir.path(), &b);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("array `u`") && err.contains("checksum"),
        "{err}"
    );

    // Hand-made headers with matching checksums.
    let (h, _) = split(&good);
    let mut twice = h.clone();
    let first = twice["arrays"][0].clone();
    twice["arrays"].as_array_mut().unwrap().insert(0, first);
    let (code, err) = restart(dir.path(), &with_header(&good, &twice));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("appears twice") || err.contains("bytes"),
        "{err}"
    );
    let mut no_history = h.clone();
    no_history["arrays"].as_array_mut().unwrap().pop();
    let (code, err) = restart(dir.path(), &with_header(&good, &no_history));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("residual history") || err.contains("bytes"),
        "{err}"
    );
}

/// README's restart, with no --out: the results go to the folder the checkpoint's run
/// wrote (said so on stderr), not nowhere.
#[test]
fn a_restart_without_out_continues_in_the_checkpoints_folder() {
    let dir = tempfile::tempdir().unwrap();
    checkpoint(dir.path());
    std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
    let o = keisan_in(
        &dir.path().join("elsewhere"),
        &[
            "run",
            "--restart",
            "../res/checkpoint.keisan",
            "--backend",
            "cpu",
            "--set",
            "jacobi.max_iterations=40",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("continuing the outputs in"), "{err}");
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("res/summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["iterations"], 40);
    assert_eq!(s["restarted_at_step"], 20);
    assert!(
        std::fs::read_dir(dir.path().join("elsewhere"))
            .unwrap()
            .next()
            .is_none()
    );
}

/// Any one byte of a checkpoint changed, anywhere in the file, is refused (exit 2) and
/// never restarts with another answer.
#[test]
fn every_flipped_byte_is_refused() {
    use proptest::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let good = checkpoint(dir.path());
    let len = good.len();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&(0..len, 1u8..=255), |(at, x)| {
            let mut b = good.clone();
            b[at] ^= x;
            let (code, err) = restart(dir.path(), &b);
            prop_assert_eq!(code, 2, "byte {} ^ {}: {}", at, x, err);
            Ok(())
        })
        .unwrap();
}
