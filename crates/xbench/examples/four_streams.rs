//! Four TCP streams for 2 s against an in-process loopback server: 12 lines in all.

#![allow(clippy::print_stdout)] // an example program owns its terminal

pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    let spec = xbench::Test::throughput()
        .streams(4)
        .duration(std::time::Duration::from_secs(2));
    let report = xbench::blocking::run_local(spec.build()?)?;
    println!("{report}");
    Ok(())
}
