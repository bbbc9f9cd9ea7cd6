//! `nnpc diff`: compare a hardware output dump (or trace) with the software graph, bit for bit.

use super::files::{provenance, provenance_warnings};
use super::host_args::run_failed;
use indicatif::ProgressFinish;
use nnp_lowering::swgraph::Roots;
use nnp_runtime::diff::{CompareError, Comparison, Dump, Measure, html};
use nnp_runtime::exec::ExecOptions;
use nnp_runtime::host::Progress;
use nnp_runtime::io;
use std::process::ExitCode;
use std::sync::Arc;

pub fn run(args: Args) -> miette::Result<ExitCode> {
    let program = match args.firmware.load() {
        Ok(p) => p,
        Err(code) => return Ok(not_compared(code)),
    };
    let dump = Dump::open(&program, &args.hardware, args.layout.into()).map_err(super::fail)?;
    // A dump nnpc made says how; where that is not how this diff runs, say so first.
    if let Some(made) = io::read_metadata(&args.hardware) {
        for w in provenance_warnings(
            &args.hardware,
            &made,
            &args.firmware.file,
            &program,
            &args.data,
        ) {
            super::output::stderr(format!("warning: {w}\n"))?;
        }
    }
    // The page may not replace a file the diff reads; refused before the run.
    let mut reads = args.firmware.reads(&program);
    reads.data(&args.data);
    reads.add("the hardware dump --hardware gives", &args.hardware);
    if let Some(trace) = &args.trace {
        reads.add("the trace --trace gives", trace);
    }
    if let Some(page) = &args.report {
        reads.check("--report", page)?;
    }
    let (weights, feed) = args
        .data
        .feed(&program, dump.batch(&program))
        .map_err(super::fail)?;
    let batch = feed.batch;
    dump.check(&program, batch)
        .map_err(|e| super::fail_in(format!("`{}`", args.hardware.display()), &e))?;

    let roots = if args.trace.is_some() {
        Roots::OutputsAndWrites
    } else {
        Roots::Outputs
    };
    let graph = match super::compile(&program, roots) {
        Ok(g) => g,
        Err(code) => return Ok(not_compared(code)),
    };
    let comparison = Comparison {
        program: &program,
        dump: &dump,
        feed: &feed,
        exec: ExecOptions {
            device: args.device.into(),
            chunk_items: args.chunks.chunk_items,
            ..ExecOptions::default()
        },
        meter: &meter,
        maps: args.report.is_some(),
    };
    let explain = args.explain.map(Into::into);
    let trace = args.trace.as_deref();
    let report = match comparison.report(&graph, weights, args.first, trace, explain) {
        Ok(report) => report,
        Err(CompareError::Exec(e)) => {
            return run_failed(&program.source, e.into()).map(not_compared);
        }
        Err(e) => return Err(super::fail(e)),
    };

    if let Some(page) = &args.report {
        let ctx = html::Context {
            program: Some(&program),
            hardware: args.hardware.display().to_string(),
            hardware_made: io::read_metadata(&args.hardware),
            software_made: Some(provenance(
                &args.firmware.file,
                &program,
                false,
                &args.data,
                batch,
            )),
        };
        super::write_output(
            "--report",
            page,
            html::render(&report, &ctx).as_bytes(),
            &reads,
        )?;
    }
    if args.json {
        let v = serde_json::to_string_pretty(&report).map_err(super::fail)?;
        super::output::stdout(format!("{v}\n"))?;
    } else {
        let mut text = String::new();
        print_report(&mut text, &args, &program, &report, batch);
        super::output::stdout(text)?;
    }
    if let Some(page) = &args.report {
        super::output::note(format!("report written to {}\n", page.display()))?;
    }
    Ok(if report.concordant {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The exit status of a diff that made no comparison, from the status the shared loaders give
/// (1 for firmware errors): 2, so that 1 always means "not concordant".
fn not_compared(code: ExitCode) -> ExitCode {
    match code == ExitCode::from(1) {
        true => ExitCode::from(2),
        false => code,
    }
}

/// The progress bars of a comparison's runs and of the explain search, on a terminal.
fn meter(measure: Measure) -> Option<Progress> {
    let bar = match measure {
        Measure::Run { batch } => super::bar("running", batch, "input sets"),
        Measure::Explain { changes } => {
            super::bar("explaining", changes, "changes of the numerics")
        }
    };
    // Cleared when the measure is done and drops its callback.
    let bar = bar.with_finish(ProgressFinish::AndClear);
    Some(Progress(Arc::new(move |n| bar.inc(n as u64))))
}

mod args;
mod report;

pub use args::Args;
use report::print_report;
