//! The noise floor of two live runs of the same scenario and seed (`live::noise`):
//! `run_distance RUN_A RUN_B [--json]` prints how far the second run's figures and
//! per-class step times are from the first's. `scripts/live-figures.sh` runs it.
use live::records::RunDir;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let dirs: Vec<&String> = args.iter().filter(|a| *a != "--json").collect();
    let [a, b] = dirs[..] else {
        eprintln!("usage: run_distance RUN_A RUN_B [--json]");
        return ExitCode::from(2);
    };
    let load = |d: &str| RunDir::load(std::path::Path::new(d));
    let (ra, rb) = match (load(a), load(b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("run_distance: {e}");
            return ExitCode::from(2);
        }
    };
    let d = live::noise::run_distance(&ra, &rb);
    if json {
        match serde_json::to_string_pretty(&d) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("run_distance: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", d.render());
    }
    ExitCode::SUCCESS
}
