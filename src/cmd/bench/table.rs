//! `nnpc bench`'s report as a table.

use serde_json::Value;

/// The report as a table.
pub(super) fn table(r: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    table_header(&mut s, r);
    s.push('\n');
    table_times(&mut s, r);
    s.push('\n');
    let mib = |v: &Value| match v.as_u64() {
        Some(k) => format!("{:.1} MiB", k as f64 / 1024.0),
        None => "n/a".into(),
    };
    let _ = writeln!(
        s,
        "peak RSS (VmHWM): {} after the first run (= `nnpc run`), {} at the end",
        mib(&r["peak_rss_kib"]["after_first_run"]),
        mib(&r["peak_rss_kib"]["end"])
    );
    table_memory(&mut s, r);
    let concordance = match r["concordant"].as_bool() {
        Some(true) => "outputs of graph and emulator bit-identical",
        Some(false) => "OUTPUTS DIFFER between graph and emulator",
        None => "not checked (--skip-emulator)",
    };
    let _ = writeln!(s, "concordance: {concordance}");
    s.push('\n');
    let _ = writeln!(
        s,
        "{:<48} {:>10} {:>8} {:>6}",
        "ratio", "value", "target", ""
    );
    for x in r["ratios"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "{:<48} {:>10.2} {:>8} {:>6}",
            x["name"].as_str().unwrap_or("?"),
            f64_of(&x["value"]),
            x["target"].as_str().unwrap_or("?"),
            if x["pass"] == Value::Bool(true) {
                "PASS"
            } else {
                "MISS"
            }
        );
    }
    for x in r["context"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "{:<48} {:>10.2} {:>15}",
            x["name"].as_str().unwrap_or("?"),
            f64_of(&x["value"]),
            "(context)"
        );
    }
    s
}

/// A number of the report (NaN where there is none).
fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// The table's first lines: what was measured, on what machine, and how the products ran.
fn table_header(s: &mut String, r: &Value) {
    use std::fmt::Write as _;
    let counted = |v: &Value, noun: &str| match v.as_u64() {
        Some(n) => crate::cmd::output::count(n as usize, noun),
        None => format!("{v} {noun}s"),
    };
    let sw = &r["software_graph"];
    let _ = writeln!(
        s,
        "{}: `{}` (N = {}), batch {}, {} per item, median of {}",
        r["file"].as_str().unwrap_or("?"),
        r["target"].as_str().unwrap_or("?"),
        r["native"],
        r["batch"],
        counted(&r["vectors_per_batch_item"], "vector"),
        counted(&r["reps"], "run")
    );
    let _ = writeln!(
        s,
        "machine: {}, {} threads",
        r["machine"]["cpu"].as_str().unwrap_or("?"),
        r["machine"]["threads"]
    );
    let _ = match sw["gpu"].as_str() {
        Some(gpu) => writeln!(
            s,
            "products: {} of {} on the integer kernel, {} of them on the GPU ({gpu}), the rest \
             on the float path",
            sw["int_products"], sw["products"], sw["gpu_products"]
        ),
        None => writeln!(
            s,
            "products: {} of {} on the integer kernel ({} of them on bytes with AVX-512 VNNI \
             vpdpbusd, the others AVX2 vpmaddwd; {} on integer slices), the rest on the float \
             path ({} on its bounded f64 matmul)",
            sw["int_products"],
            sw["products"],
            sw["byte_products"],
            sw["sliced_products"],
            sw["bounded_products"]
        ),
    };
    if sw["shards"].as_u64().is_some_and(|k| k > 1) {
        let _ = writeln!(
            s,
            "warm runs: {} shards of items side by side (`--shards 1`: the whole batch in one \
             pass)",
            sw["shards"]
        );
    }
    if sw["stacked_products"].as_u64().is_some_and(|k| k > 0) {
        let _ = writeln!(
            s,
            "warm runs: {} products stacked with the others of their weight stack, one \
             product over all their vectors (passes of at most 4 items)",
            sw["stacked_products"]
        );
    }
}

/// The table's measurements: seconds and rate of each.
fn table_times(s: &mut String, r: &Value) {
    use std::fmt::Write as _;
    let sw = &r["software_graph"];
    let _ = writeln!(s, "{:<44} {:>12} {:>16}", "measurement", "seconds", "rate");
    let row = |s: &mut String, name: &str, secs: f64, rate: String| {
        let _ = writeln!(s, "{name:<44} {secs:>12.4} {rate:>16}");
    };
    row(
        s,
        "software graph (first run, weights prepared)",
        f64_of(&sw["first_run_seconds"]),
        String::new(),
    );
    row(
        s,
        "software graph",
        f64_of(&sw["seconds"]),
        format!("{:.1} vec/s", f64_of(&sw["vectors_per_second"])),
    );
    row(
        s,
        "software graph, back to back",
        f64_of(&sw["back_to_back_seconds"]),
        format!(
            "{:.1} vec/s",
            f64_of(&sw["back_to_back_vectors_per_second"])
        ),
    );
    let e = &r["emulator"];
    if !e.is_null() {
        let runs = match e["runs"].as_u64() {
            Some(k) if k > 1 => format!("median of {k} runs"),
            _ => "1 run".to_string(),
        };
        row(
            s,
            &format!("emulator ({} items, {runs})", e["batch"]),
            f64_of(&e["seconds"]),
            format!("{:.2} vec/s", f64_of(&e["vectors_per_second"])),
        );
    }
    let p = &r["products_alone"];
    if !p.is_null() {
        row(
            s,
            "products alone (integer kernel)",
            f64_of(&p["seconds"]),
            format!("{:.1} GMAC/s", f64_of(&p["macs_per_second"]) / 1e9),
        );
    }
    let fl = &r["floor"];
    row(
        s,
        &format!("plain f32 matmuls, candle ({} calls)", fl["matmuls"]),
        f64_of(&fl["seconds"]),
        format!("{:.1} GFLOP/s", f64_of(&fl["gflops"])),
    );
    if let Some(f) = fl["peak_fraction"].as_f64() {
        let _ = writeln!(
            s,
            "(plain f32 matmuls: {:.1}% of the f32 FMA peak, {:.1} GFLOP/s on {})",
            100.0 * f,
            f64_of(&fl["fma_peak_gflops"]),
            fl["fma_instruction"].as_str().unwrap_or("?")
        );
    }
    let q = &r["quantize"];
    row(
        s,
        &format!("quantize kernel ({} elements)", q["elements"]),
        f64_of(&q["quantize_seconds"]),
        format!(
            "{:.0} M/s",
            f64_of(&q["quantize_elements_per_second"]) / 1e6
        ),
    );
    row(
        s,
        "element-wise x * 1.5 + 0.25 (same tensor)",
        f64_of(&q["elementwise_seconds"]),
        format!(
            "{:.0} M/s",
            f64_of(&q["elementwise_elements_per_second"]) / 1e6
        ),
    );
    let _ = writeln!(
        s,
        "(quantize kernel: the graph's BFP vector quantizer, {})",
        q["format"].as_str().unwrap_or("?")
    );
}

/// The int8 peak and the fractions of it, and the memory after the first run per weight.
fn table_memory(s: &mut String, r: &Value) {
    use std::fmt::Write as _;
    let pk = &r["peak"];
    let _ = writeln!(
        s,
        "int8 peak: {:.1} G multiply-adds/s ({}, {} threads); the graph {:.1}% of it, the \
         products alone {}",
        f64_of(&pk["int8_macs_per_second"]) / 1e9,
        pk["instruction"].as_str().unwrap_or("?"),
        pk["threads"],
        100.0 * f64_of(&r["software_graph"]["peak_fraction"]),
        match r["products_alone"]["peak_fraction"].as_f64() {
            Some(f) => format!("{:.1}%", 100.0 * f),
            None => "n/a".into(),
        }
    );
    let bpw = &r["bytes_per_weight"];
    let b = |v: &Value| match v.as_f64() {
        Some(x) => format!("{x:.2}"),
        None => "n/a".into(),
    };
    let _ = writeln!(
        s,
        "bytes per weight ({} weights): {} peak after the first run, {} resident after it, {} \
         once the host's weights are dropped (the session's)",
        r["weights"],
        b(&bpw["peak_after_first_run"]),
        b(&bpw["after_first_run"]),
        b(&bpw["session_alone"])
    );
}
