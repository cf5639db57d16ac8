//! What launching a kernel costs on GPU `N` (default 0): eager launches one by one, and
//! the same chain replayed as a CUDA graph (`engine::device::cuda::LaunchCosts`): what
//! the cost model's `launch` parameters stand for. A missing GPU is a clear error.
//!
//!   cargo run --release -p engine --example launch_costs [N]

fn main() {
    let n: usize = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("launch_costs: the GPU ordinal must be a number: {e}");
            std::process::exit(2);
        }
    };
    let run = || -> engine::Result<(String, engine::device::cuda::LaunchCosts)> {
        let mut dev = engine::CudaDevice::open(n)?;
        let name = engine::Backend::describe(&dev);
        Ok((name, dev.launch_costs(8, 264, 21)?))
    };
    match run() {
        Ok((name, c)) => {
            println!("{name}");
            println!(
                "eager launch: {:.2} us host per launch, {:.2} us GPU per kernel",
                c.eager_host_s * 1e6,
                c.eager_gpu_s * 1e6
            );
            println!(
                "graph replay: {:.2} us fixed, {:.2} us per node (chains of {} and {} kernels)",
                c.graph_s * 1e6,
                c.graph_node_s * 1e6,
                c.chains.0,
                c.chains.1
            );
            println!("(the cost model's launch.eager_s, launch.graph_s and launch.graph_node_s)");
        }
        Err(e) => {
            eprintln!("launch_costs: cuda:{n}: {e}");
            std::process::exit(1);
        }
    }
}
