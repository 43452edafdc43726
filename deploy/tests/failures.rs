//! Failures, interruptions, repeated teardowns and `gc`, against the moto emulator.

// Helpers outside #[test] fns unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::pending;
use std::time::{Duration, SystemTime};

use xbench_deploy::apply::UpOptions;
use xbench_deploy::aws::ec2::{self, Selector};
use xbench_deploy::cost::PriceTable;
use xbench_deploy::state::RunId;
use xbench_deploy::{Error, Plan, Scenario};

use common::{TempDir, two_regions, up_options};

const PEERING: &str = "[[path]]\nkind = \"peering\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n[[path]]\nkind = \"tgw\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n";

fn load(text: &str) -> (Scenario, Plan) {
    let s = Scenario::from_toml(text).unwrap();
    let p = Plan::build(&s, &PriceTable::shipped()).unwrap();
    (s, p)
}

/// A zone AWS does not have, in the second region: passes the scenario checks, fails at
/// CreateSubnet after the first region is fully built.
fn bad_zone_scenario() -> String {
    two_regions("inject", PEERING).replace(
        "cidr = \"10.20.0.0/16\"",
        "cidr = \"10.20.0.0/16\"\naz = \"ap-southeast-2x\"",
    )
}

#[tokio::test]
async fn failure_halfway_through_up_leaves_nothing() {
    let moto = moto_or_skip!();
    let state = TempDir::new("state");
    let (d, _, _) = moto.deployer(state.path()).await;
    let (s, p) = load(&bad_zone_scenario());
    let err = d
        .up(&s, &p, &up_options(state.path()), pending())
        .await
        .unwrap_err();
    let Error::UpFailed {
        cause: source,
        teardown,
        kept,
        run_id,
    } = &err
    else {
        panic!("unexpected error: {err}");
    };
    assert!(!kept);
    assert!(teardown.is_none(), "teardown failed: {teardown:?}");
    match &**source {
        Error::Aws {
            operation,
            region,
            message,
            ..
        } => {
            assert_eq!(*operation, "CreateSubnet");
            assert_eq!(region, "ap-southeast-2");
            assert!(
                message.contains("ap-southeast-2x"),
                "AWS's own message: {message}"
            );
        }
        other => panic!("expected an AWS error, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("CreateSubnet in ap-southeast-2 failed"),
        "{text}"
    );
    assert!(text.contains("was deleted again"), "{text}");
    // It did get halfway: the state file saw resources in the first region.
    let local = d
        .state_dir()
        .load(&run_id.parse().unwrap())
        .unwrap()
        .unwrap();
    assert!(
        local
            .created
            .iter()
            .any(|c| c.starts_with("us-east-1/vpc-")),
        "{local:?}"
    );
    let left = moto.leftovers().await;
    assert!(left.is_empty(), "left after automatic teardown: {left:#?}");
}

#[tokio::test]
async fn kept_failure_resumes_with_the_same_run_id() {
    let moto = moto_or_skip!();
    let state = TempDir::new("state");
    let (d, _, _) = moto.deployer(state.path()).await;
    let (bad, bad_plan) = load(&bad_zone_scenario());
    let keep = UpOptions {
        keep_on_failure: true,
        ..up_options(state.path())
    };
    let Err(Error::UpFailed {
        run_id, kept: true, ..
    }) = d.up(&bad, &bad_plan, &keep, pending()).await
    else {
        panic!("expected a kept failure");
    };
    let run: RunId = run_id.parse().unwrap();
    let before = ec2::discover(&d.aws().region("us-east-1"), &Selector::Run(run.clone()))
        .await
        .unwrap();
    assert!(!before.vpcs.is_empty(), "kept resources are still there");

    // Fixed scenario, same run: continues and reuses what exists.
    let (good, good_plan) = load(&two_regions("inject", PEERING));
    let resume = UpOptions {
        run_id: Some(run.clone()),
        ..up_options(state.path())
    };
    let out = d.up(&good, &good_plan, &resume, pending()).await.unwrap();
    assert_eq!(out.run_id, run);
    let after = ec2::discover(&d.aws().region("us-east-1"), &Selector::Run(run.clone()))
        .await
        .unwrap();
    assert_eq!(
        after.vpcs, before.vpcs,
        "the first region's VPC was reused, not duplicated"
    );

    d.down(&run, &[]).await.unwrap();
    assert!(moto.leftovers().await.is_empty());
}

#[tokio::test]
async fn interrupted_up_tears_down() {
    let moto = moto_or_skip!();
    let state = TempDir::new("state");
    let (d, _, _) = moto.deployer(state.path()).await;
    let (s, p) = load(&two_regions("ctrlc", PEERING));
    let dir = state.path().to_owned();
    // "Ctrl-C" once the run has created a handful of resources.
    let interrupt = async move {
        loop {
            let created = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| std::fs::read_to_string(e.path().join("state.json")).ok())
                .map(|t| t.matches("\"us-east-1/").count() + t.matches("\"ap-southeast-2/").count())
                .max()
                .unwrap_or(0);
            if created >= 6 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let err = d
        .up(&s, &p, &up_options(state.path()), interrupt)
        .await
        .unwrap_err();
    match &err {
        Error::UpFailed {
            cause: source,
            teardown: None,
            kept: false,
            ..
        } => {
            assert!(matches!(**source, Error::Interrupted), "{err}");
        }
        other => panic!("unexpected: {other}"),
    }
    let left = moto.leftovers().await;
    assert!(left.is_empty(), "left after interrupted up: {left:#?}");
}

#[tokio::test]
async fn down_twice_is_harmless() {
    let moto = moto_or_skip!();
    let state = TempDir::new("state");
    let (d, _, _) = moto.deployer(state.path()).await;
    let (s, p) = load(&two_regions("twice", PEERING));
    let out = d
        .up(&s, &p, &up_options(state.path()), pending())
        .await
        .unwrap();
    let first = d.down(&out.run_id, &[]).await.unwrap();
    assert!(!first.deleted.is_empty());
    let second = d.down(&out.run_id, &[]).await.unwrap();
    assert!(second.deleted.is_empty(), "{:?}", second.deleted);

    // Without the local state file (another machine), down searches every region.
    std::fs::remove_dir_all(state.path()).unwrap();
    let third = d.down(&out.run_id, &[]).await.unwrap();
    assert!(third.deleted.is_empty());
    assert!(
        third.regions.len() > 10,
        "searched every region: {:?}",
        third.regions
    );
    assert!(moto.leftovers().await.is_empty());
}

#[tokio::test]
async fn gc_removes_expired_and_keeps_fresh() {
    let moto = moto_or_skip!();
    let state = TempDir::new("state");
    let (d, _, _) = moto.deployer(state.path()).await;
    let now = SystemTime::now();
    // The expired run lives 1 hour, the fresh one 48; gc judges as of 2 hours from now.
    // The expired run uploads its binary, so it has a bucket for gc to find and delete too.
    let (old_s, old_p) = load(
        &two_regions("old", PEERING)
            .replace("ttl_hours = 2", "ttl_hours = 1")
            .replace("url = \"https://example.com/xbench\"\n", "")
            .replace(&format!("sha256 = \"{}\"\n", common::URL_SHA256), ""),
    );
    assert_eq!(old_s.xbench, xbench_deploy::scenario::XbenchInstall::Upload);
    let (new_s, new_p) = load(
        &two_regions("fresh", PEERING)
            .replace("ttl_hours = 2", "ttl_hours = 48")
            .replace("10.10.", "10.30.")
            .replace("10.20.", "10.40."),
    );
    let at = |now| UpOptions {
        now,
        ..up_options(state.path())
    };
    let old = d.up(&old_s, &old_p, &at(now), pending()).await.unwrap();
    let fresh = d.up(&new_s, &new_p, &at(now), pending()).await.unwrap();

    // Dry run first: reports, deletes nothing.
    let later = now + Duration::from_secs(2 * 3600);
    let dry = d.gc(later, &[], true).await.unwrap();
    assert!(dry.deleted.is_empty());
    assert!(
        dry.runs
            .iter()
            .any(|r| r.run_id == old.run_id.as_str() && r.expired)
    );

    let report = d.gc(later, &[], false).await.unwrap();
    let seen = |id: &RunId| {
        report
            .runs
            .iter()
            .find(|r| r.run_id == id.as_str())
            .cloned()
            .unwrap()
    };
    assert!(seen(&old.run_id).expired);
    assert!(!seen(&fresh.run_id).expired);
    assert!(!report.deleted.is_empty());

    for region in ["us-east-1", "ap-southeast-2"] {
        let r = d.aws().region(region);
        assert!(
            ec2::discover(&r, &Selector::Run(old.run_id.clone()))
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            !ec2::discover(&r, &Selector::Run(fresh.run_id.clone()))
                .await
                .unwrap()
                .is_empty()
        );
    }
    d.down(&fresh.run_id, &[]).await.unwrap();
    assert!(moto.leftovers().await.is_empty());
}
