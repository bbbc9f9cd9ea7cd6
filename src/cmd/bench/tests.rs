//! `nnpc bench` end to end on a small sample.

use super::*;

/// The bench runs end to end on a small sample in debug: every field is there and the
/// graph and the emulator agree bit for bit.
#[test]
fn bench_reports_every_field_on_a_small_sample() {
    let args = Args {
        firmware: crate::cmd::Firmware {
            file: std::path::PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/samples/mlp2_relu.nnp"
            )),
            target: None,
        },
        batch: 2,
        seed: 1,
        reps: 1,
        emu_batch: None,
        skip_emulator: false,
        float_matmul: false,
        unfused: false,
        device: DeviceArg::Cpu,
        shards: None,
        kernel_len: 1 << 14,
        json: true,
    };
    let program = nnpc::load_program(&args.firmware.file, None).expect("sample checks");
    let graph = nnp_lowering::swgraph::compile(&program, Roots::Outputs).expect("lowers");
    let r = measure(&args, &program, &graph, &Progress(ProgressBar::hidden())).expect("bench runs");
    assert_eq!(r["concordant"], Value::Bool(true));
    assert_eq!(r["batch"], 2);
    // mlp2_relu pushes T = 4 input rows per item.
    assert_eq!(r["software_graph"]["vectors"], 8);
    assert_eq!(r["emulator"]["batch"], 2);
    // --reps 1, but 3 rounds where the emulator runs, and a run this short takes all three.
    assert_eq!(r["emulator"]["runs"], 3);
    assert!(
        r["emulator"]["graph_seconds"]
            .as_f64()
            .is_some_and(|t| t > 0.0)
    );
    // Two layers of T = 4 iterations each: 8 products, on the integer kernel where the
    // CPU has AVX2 (mlp2_relu is BFP 8 on bw-default).
    assert_eq!(r["floor"]["matmuls"], 8);
    assert_eq!(r["software_graph"]["products"], 8);
    let int = if nnp_runtime::exec::intdot::simd() {
        8
    } else {
        0
    };
    assert_eq!(r["software_graph"]["int_products"], int);
    // And on bytes where the CPU has AVX-512 VNNI (BFP 8 mantissas fit a byte).
    let bytes = if nnp_runtime::exec::intdot::Kernel::best().is_vnni() {
        8
    } else {
        0
    };
    assert_eq!(r["software_graph"]["byte_products"], bytes);
    assert!(
        r["software_graph"]["vectors_per_second"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );
    // The runs back to back: one round, a run this short takes all three.
    assert!(
        r["software_graph"]["back_to_back_seconds"]
            .as_f64()
            .is_some_and(|t| t > 0.0)
    );
    assert!(r["quantize"]["quantize_seconds"].as_f64().is_some());
    // Multiply-adds per run, every weight of the stacks padded to N = 128 once per item:
    // W1 3 x 2 tiles and W2 1 x 3 tiles, each T = 4 times an item, 2 items.
    let macs = 2 * 4 * (3 * 2 + 3) * 128 * 128;
    assert_eq!(r["floor"]["macs"], macs);
    assert_eq!(r["software_graph"]["macs"], macs);
    let frac = |v: &Value| v["peak_fraction"].as_f64().expect("a fraction");
    assert!(frac(&r["software_graph"]) > 0.0);
    // The products alone where the integer kernel runs, the same multiply-adds.
    match nnp_runtime::exec::intdot::simd() {
        true => {
            assert_eq!(r["products_alone"]["macs"], macs);
            assert_eq!(r["products_alone"]["on_bytes"], bytes == 8);
            assert!(frac(&r["products_alone"]) > 0.0);
        }
        false => assert!(r["products_alone"].is_null()),
    }
    let peak = &r["peak"];
    assert!(
        peak["int8_macs_per_second"]
            .as_f64()
            .is_some_and(|p| p > 0.0)
    );
    assert!(peak["threads"].as_u64().is_some_and(|t| t >= 1));
    // The weights the host holds: W1 384 x 200, W2 100 x 384, b1 384, b2 100.
    assert_eq!(r["weights"], 384 * 200 + 100 * 384 + 384 + 100);
    // A warm run goes without the host's weights: the session's memory is measured.
    assert!(
        r["rss_kib"]["session_alone"]
            .as_u64()
            .is_some_and(|k| k > 0)
    );
    let bpw = r["bytes_per_weight"]["session_alone"].as_f64();
    assert!(bpw.is_some_and(|b| b > 0.0));
    let names: Vec<&str> = r["ratios"]
        .as_array()
        .expect("ratios")
        .iter()
        .filter_map(|x| x["name"].as_str())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    for x in r["ratios"].as_array().into_iter().flatten() {
        assert!(x["pass"].is_boolean() && x["value"].is_number());
    }
    // The context: the floor's rate over the emulator's, which is the graph's speed-up
    // times how much faster than the graph the floor ran.
    let v = |x: &Value| x["value"].as_f64().expect("a number");
    let context = r["context"].as_array().expect("context");
    assert_eq!(context.len(), 1);
    let (vs_emu, vs_floor) = (v(&r["ratios"][0]), v(&r["ratios"][1]));
    // The identity holds where the emulator ran in every round: its graph median is then the
    // graph's.
    assert_eq!(
        r["emulator"]["graph_seconds"],
        r["software_graph"]["seconds"]
    );
    let floor_vs_emu = v(&context[0]);
    assert!(floor_vs_emu > 0.0);
    assert!((floor_vs_emu - vs_emu * vs_floor).abs() <= 1e-9 * floor_vs_emu);
}
