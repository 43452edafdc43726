//! Each subcommand: turn flags into library values, call the library, print the result.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use std::sync::Arc;

use anyhow::{Context as _, Result};
use xbench_deploy::apply::UpOptions;
use xbench_deploy::aws::accelerator::NoAccelerators;
use xbench_deploy::aws::{Aws, AwsSettings, Timing};
use xbench_deploy::cost::PriceTable;
use xbench_deploy::state::{RunId, StateDir, parse_time, write_json};
use xbench_deploy::{Deployer, Plan, Scenario};

use crate::cli::{Common, DownArgs, GcArgs, PlanArgs, UpArgs};
use crate::exit::{BadInput, Exit};
use crate::render;

fn state_dir(c: &Common) -> StateDir {
    if let Some(d) = &c.state_dir {
        return StateDir::new(d);
    }
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("."));
    StateDir::new(base.join("xbench-deploy"))
}

async fn deployer(c: &Common) -> Result<Deployer> {
    let settings = AwsSettings {
        endpoint_url: c.endpoint_url.clone(),
        profile: c.profile.clone(),
        static_credentials: None,
    };
    let aws = Aws::connect(&settings).await.context("connecting to AWS")?;
    let timing = Timing {
        poll: Duration::from_millis(c.poll_ms),
        timeout: Duration::from_secs(c.wait_secs),
    };
    let mut d = Deployer::new(aws, state_dir(c)).with_timing(timing);
    if c.skip_accelerators {
        d = d.with_accelerators(Arc::new(NoAccelerators));
    }
    Ok(d)
}

fn load(file: &std::path::Path) -> Result<(Scenario, Plan)> {
    let scenario = Scenario::from_file(file)
        .map_err(xbench_deploy::Error::from)
        .with_context(|| format!("scenario {}", file.display()))?;
    let prices = PriceTable::shipped().with_overrides(&scenario.prices);
    let plan = Plan::build(&scenario, &prices)
        .map_err(xbench_deploy::Error::from)
        .with_context(|| format!("scenario {}", file.display()))?;
    Ok((scenario, plan))
}

#[allow(clippy::print_stdout)] // the plan is the command's output
pub(crate) async fn plan(c: &Common, a: PlanArgs) -> Result<Exit> {
    let (scenario, plan) = load(&a.file)?;
    let pre = if a.check {
        let d = deployer(c).await?;
        Some(
            d.preflight(&scenario, &plan)
                .await
                .context("checking the scenario with AWS")?,
        )
    } else {
        None
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", render::plan(&plan, pre.as_ref()));
        if !a.check {
            println!(
                "(instance types, AMIs and zones are checked with AWS by `up`, or now with --check)"
            );
        }
    }
    Ok(Exit::Success)
}

#[allow(clippy::print_stdout, clippy::print_stderr)] // prompt and results
pub(crate) async fn up(c: &Common, a: UpArgs) -> Result<Exit> {
    let (scenario, plan) = load(&a.file)?;
    if c.skip_accelerators && plan.needs_accelerator_api() {
        return Err(BadInput(
            "the scenario has accelerator paths, but --skip-accelerators switches Global Accelerator off".into(),
        )
        .into());
    }
    let run_id = match &a.run_id {
        Some(r) => Some(r.parse::<RunId>()?),
        None => None,
    };
    if !a.yes && !std::io::stdin().is_terminal() {
        return Err(BadInput(
            "refusing to create resources without confirmation: stdin is not a terminal; pass --yes".into(),
        )
        .into());
    }
    // Credentials are checked before asking, so a "yes" is not wasted on a missing login.
    let d = deployer(c).await?;
    print!("{}", render::plan(&plan, None));
    if !a.yes {
        print!("\ncreate these resources? type 'yes' to go on: ");
        std::io::stdout().flush()?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        if line.trim() != "yes" {
            return Err(BadInput("not confirmed; nothing was created".into()).into());
        }
    }
    let opts = UpOptions {
        run_id,
        keep_on_failure: a.keep,
        now: SystemTime::now(),
    };
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            // No signal handler: never interrupt.
            std::future::pending::<()>().await;
        }
        eprintln!(
            "xbench-deploy: interrupted; deleting what was created (Ctrl-C again to abandon)"
        );
        tokio::spawn(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!(
                    "xbench-deploy: teardown abandoned; finish it with `xbench-deploy down RUN_ID` or `xbench-deploy gc`"
                );
                std::process::exit(Exit::Interrupted.code());
            }
        });
    };
    let outputs = d
        .up(&scenario, &plan, &opts, interrupt)
        .await
        .with_context(|| format!("up {}", a.file.display()))?;
    let mut file = d.state_dir().outputs_file(&outputs.run_id);
    if let Some(extra) = &a.outputs {
        write_json(extra, &outputs)?;
        file = extra.clone();
    }
    print!("\n{}", render::outputs(&outputs, &file));
    Ok(Exit::Success)
}

#[allow(clippy::print_stdout)]
pub(crate) async fn down(c: &Common, a: DownArgs) -> Result<Exit> {
    let run: RunId = a.run_id.parse()?;
    let d = deployer(c).await?;
    let report = d
        .down(&run, &a.regions)
        .await
        .with_context(|| format!("down {run}"))?;
    print!("{}", render::down(run.as_str(), &report));
    Ok(Exit::Success)
}

#[allow(clippy::print_stdout)]
pub(crate) async fn gc(c: &Common, a: GcArgs) -> Result<Exit> {
    let now = match &a.as_of {
        Some(t) => parse_time(t).ok_or_else(|| {
            BadInput(format!(
                "--as-of '{t}' is not an RFC 3339 time such as 2025-06-01T12:00:00Z"
            ))
        })?,
        None => SystemTime::now(),
    };
    let d = deployer(c).await?;
    let report = d.gc(now, &a.regions, a.dry_run).await.context("gc")?;
    print!("{}", render::gc(&report, a.dry_run));
    Ok(Exit::Success)
}
