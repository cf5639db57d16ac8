//! `twin kernel OP`: one kernel priced exactly as the step model prices it, reported
//! with its public benchmark's accounting (the rows of
//! `scenarios/published/kernels-public.csv` are such commands).

use anyhow::Result;
use scenario::flags::kernel::KernelArgs;
use scenario::kernel::{evaluate, to_json};

pub fn run(args: &KernelArgs) -> Result<()> {
    let k = evaluate(&args.request()?)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&k))?);
        return Ok(());
    }
    let r = &k.result;
    println!("{} on {}", k.what, k.hardware);
    let parts = if r.kernel.compute_s > 0.0 || r.kernel.memory_s > 0.0 {
        format!(
            "; compute {:.2} us, memory/link {:.2} us",
            r.kernel.compute_s * 1e6,
            r.kernel.memory_s * 1e6
        )
    } else {
        String::new()
    };
    println!(
        "time {:.2} us ({} bound{parts})",
        r.time_s * 1e6,
        r.kernel.bound.name()
    );
    match (r.flops > 0.0, r.bytes > 0.0) {
        (true, true) => println!(
            "{:.0} TFLOP/s, {:.0} GB/s (the benchmark's accounting)",
            r.tflops(),
            r.gb_s()
        ),
        (true, false) => println!("{:.0} TFLOP/s", r.tflops()),
        (false, _) => println!("{:.1} GB/s (the benchmark's accounting)", r.gb_s()),
    }
    println!("cost model: {}", k.cost_model);
    Ok(())
}
