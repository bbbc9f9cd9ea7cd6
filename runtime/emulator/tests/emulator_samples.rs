//! Every sample runs on every target its `// nnpc: targets = ...` line names, with output
//! shapes as declared; the LSTM sample under the all-fp32 target matches a plain f64 LSTM.

use nnp_emulator::{EmuOptions, emulate};
use nnp_grammar::{Program, SourceFile, Target};
use nnp_host::HostData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples")
}

fn load_target(name: &str) -> Target {
    if name == "bw-default" {
        return Target::bw_default();
    }
    let path = samples_dir().join("targets").join(format!("{name}.toml"));
    Target::load(&path.to_string_lossy()).unwrap_or_else(|e| panic!("{e}"))
}

fn check(path: &Path, target: Target) -> Program {
    let text = std::fs::read_to_string(path).unwrap();
    let src = Arc::new(SourceFile::new(path.to_string_lossy(), text));
    match nnp_grammar::check(src.clone(), Some(target)) {
        Ok(out) => out.program,
        Err(diags) => {
            let msgs: Vec<String> = diags
                .iter()
                .map(|d| format!("line {}: {}", src.line_of(d.span().start), d.message))
                .collect();
            panic!("{} does not check:\n{}", path.display(), msgs.join("\n"))
        }
    }
}

/// Target names from the header line `// nnpc: targets = a, b, c`.
fn header_targets(text: &str) -> Vec<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("// nnpc: targets ="))
        .map(|rest| rest.split(',').map(|s| s.trim().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn every_sample_runs_on_its_targets() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(samples_dir())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "nnp"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no samples found");
    let mut runs = 0;
    for path in &paths {
        let targets = header_targets(&std::fs::read_to_string(path).unwrap());
        assert!(
            !targets.is_empty(),
            "{} has no `// nnpc: targets =` line",
            path.display()
        );
        for name in targets {
            let p = check(path, load_target(&name));
            let data = HostData::random(&p, 2, 1);
            let emu = emulate(&p, &data, &EmuOptions::default())
                .unwrap_or_else(|e| panic!("{} on {name}: {e}", path.display()));
            for d in p.outputs() {
                let mut want = vec![2];
                want.extend(&d.shape);
                assert_eq!(
                    emu.outputs[&d.name].shape,
                    want,
                    "{} on {name}",
                    path.display()
                );
            }
            runs += 1;
        }
    }
    assert!(runs >= paths.len());
}

fn sigm(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `W v` for W `[r, c]` row-major.
fn matvec(w: &[f32], v: &[f64], r: usize) -> Vec<f64> {
    let c = v.len();
    (0..r)
        .map(|i| (0..c).map(|j| f64::from(w[i * c + j]) * v[j]).sum())
        .collect()
}

#[test]
fn lstm_under_fp32_matches_an_f64_lstm() {
    // The LSTM the sample's header describes:
    //   i = sigm(Wi x + bi + Ui h), f = sigm(Wf x + bf + Uf h), o = sigm(Wo x + bo + Uo h),
    //   g = tanh(Wc x + bc + Uc h), c' = f * c + i * g, h' = o * tanh(c'); h, c start at 0.
    let path = samples_dir().join("lstm.nnp");
    let p = check(&path, load_target("fp32"));
    let batch = 2;
    let data = HostData::random(&p, batch, 5);
    let emu = emulate(&p, &data, &EmuOptions::default()).unwrap();
    let w = |n: &str| &data.weights[n].data;
    let x = &data.inputs["x"];
    let (steps, nx) = (x.shape[1], x.shape[2]);
    let nh = data.weights["bi"].len();
    let out = &emu.outputs["h"];
    let mut worst = 0.0f64;
    for item in 0..batch {
        let (mut h, mut c) = (vec![0.0f64; nh], vec![0.0f64; nh]);
        for t in 0..steps {
            let xt: Vec<f64> = x.data[(item * steps + t) * nx..(item * steps + t + 1) * nx]
                .iter()
                .map(|v| f64::from(*v))
                .collect();
            let gate = |wn: &str, un: &str, bn: &str| -> Vec<f64> {
                let a = matvec(w(wn), &xt, nh);
                let b = matvec(w(un), &h, nh);
                (0..nh).map(|k| a[k] + b[k] + f64::from(w(bn)[k])).collect()
            };
            let i = gate("Wi", "Ui", "bi");
            let f = gate("Wf", "Uf", "bf");
            let o = gate("Wo", "Uo", "bo");
            let g = gate("Wc", "Uc", "bc");
            for k in 0..nh {
                c[k] = sigm(f[k]) * c[k] + sigm(i[k]) * g[k].tanh();
                h[k] = sigm(o[k]) * c[k].tanh();
            }
            let row = &out.data[(item * steps + t) * nh..(item * steps + t + 1) * nh];
            for (k, (got, want)) in row.iter().zip(&h).enumerate() {
                let err = (f64::from(*got) - want).abs();
                worst = worst.max(err);
                // Within fp16 rounding of values below 1 (2^-11): the fp32 pipeline is far
                // more accurate than that; this checks the firmware computes an LSTM.
                assert!(
                    err <= 2f64.powi(-11),
                    "item {item} step {t} lane {k}: {got} vs {want}"
                );
            }
        }
    }
    eprintln!("lstm fp32 vs f64: worst abs error {worst:e}");
    assert!(worst > 0.0 || steps == 0);
}
