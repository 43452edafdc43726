//! Runs on AWS: each `xbench client` goes to its path's client host through SSM Run Command
//! (the host's instance profile allows nothing else), and its JSON report comes back through
//! the run's bucket — the host uploads it with a presigned PUT (no S3 permission on the host),
//! this side downloads and deletes it. Stdout through SSM would not do: SSM keeps only the
//! first 24 000 characters, and a report with intervals of many streams is longer.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::aws::BoxFuture;
use crate::aws::s3::{self, RunBucket};
use crate::aws::ssm::{self, CommandStatus};
use crate::command::{self, quote};
use crate::deployer::Deployer;
use crate::error::Error;
use crate::run::{Executor, RunPath};
use crate::state::Outputs;
use crate::userdata::{PSK_PATH, XBENCH_PATH};

/// Where xbench and the key are on the hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLayout {
    /// The xbench binary.
    pub xbench: String,
    /// The run's key.
    pub psk: String,
}

impl Default for HostLayout {
    fn default() -> Self {
        HostLayout {
            xbench: XBENCH_PATH.to_owned(),
            psk: PSK_PATH.to_owned(),
        }
    }
}

/// [`Executor`] through SSM Run Command and the run's bucket.
#[derive(Debug)]
pub struct SsmExecutor<'a> {
    d: &'a Deployer,
    bucket: RunBucket,
    /// Path label → (region, instance id) of each of its client hosts (a fleet's in order).
    clients: BTreeMap<String, Vec<(String, String)>>,
    layout: HostLayout,
}

impl<'a> SsmExecutor<'a> {
    /// The executor for run `out`, and its paths (those whose client is your own host are
    /// marked unavailable, with the command to run there).
    pub fn new(d: &'a Deployer, out: &Outputs) -> Result<(Self, Vec<RunPath>), Error> {
        let bucket = out.bucket.clone().ok_or_else(|| Error::Results {
            path: format!("run {}", out.run_id),
            message: "the run has no bucket to collect results through (it was made by an \
                      older xbench-deploy); bring it up again with `up --run-id`"
                .into(),
        })?;
        let mut clients = BTreeMap::new();
        let mut paths = Vec::new();
        for p in &out.paths {
            let host = p
                .client_host
                .as_ref()
                .and_then(|k| out.hosts.iter().find(|h| &h.key == k));
            let unavailable = match host {
                Some(h) => {
                    let mut fleet = vec![(h.region.clone(), h.instance_id.clone())];
                    for key in &p.fleet {
                        let h = out.hosts.iter().find(|h| &h.key == key).ok_or_else(|| {
                            Error::Results {
                                path: format!("run {}", out.run_id),
                                message: format!(
                                    "path {}: its client instance {key} is not in the outputs;                                      bring the run up again with `up --run-id`",
                                    p.label
                                ),
                            }
                        })?;
                        fleet.push((h.region.clone(), h.instance_id.clone()));
                    }
                    clients.insert(p.label.clone(), fleet);
                    None
                }
                None => Some(format!(
                    "its client is your host{}: measure it with `run --here` on that host, or \
                     run `{} --save DIR` there{}",
                    p.run_on.map(|a| format!(" {a}")).unwrap_or_default(),
                    p.command,
                    if p.authenticated {
                        format!(
                            ", with the run's key from `aws ssm get-parameter --with-decryption --name {} --region {} --query Parameter.Value --output text`",
                            crate::aws::ssm::psk_parameter(&out.run_id),
                            out.hosts
                                .iter()
                                .find(|h| h.role == "server")
                                .map(|h| h.region.as_str())
                                .unwrap_or("REGION")
                        )
                    } else {
                        String::new()
                    }
                )),
            };
            paths.push(RunPath {
                label: p.label.clone(),
                target: p.target.to_string(),
                port: p.port,
                authenticated: p.authenticated,
                unavailable,
                clients: u16::try_from(1 + p.fleet.len()).unwrap_or(u16::MAX),
            });
        }
        let exec = SsmExecutor {
            d,
            bucket,
            clients,
            layout: HostLayout::default(),
        };
        Ok((exec, paths))
    }

    /// The same executor with xbench and the key elsewhere (tests run the scripts on this
    /// machine).
    pub fn with_layout(mut self, layout: HostLayout) -> Self {
        self.layout = layout;
        self
    }

    async fn go(
        &self,
        path: &RunPath,
        index: usize,
        argv: &[String],
        limit: Duration,
    ) -> Result<Vec<u8>, String> {
        let (region, instance) = self
            .clients
            .get(&path.label)
            .and_then(|f| f.get(index))
            .ok_or_else(|| format!("path {} has no client host {}", path.label, index + 1))?;
        let mut nonce = [0u8; 6];
        getrandom::fill(&mut nonce).map_err(|e| e.to_string())?;
        let key = format!(
            "results/{}/{}.json",
            path.label,
            nonce.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        let aws = &self.d.aws;
        let put = s3::presign_put(aws, &self.bucket, &key, limit + Duration::from_secs(3600))
            .await
            .map_err(|e| e.to_string())?;
        let script = script(&self.layout.xbench, argv, &put);
        let r = aws.region(region);
        let inv = ssm::run_script(
            self.d.run_command(),
            &r,
            instance,
            &script,
            limit,
            self.d.timing().poll,
            &format!("xbench-deploy run: {}", path.label),
        )
        .await
        .map_err(|e| e.to_string())?;
        let got = s3::get(aws, &self.bucket, &key)
            .await
            .map_err(|e| e.to_string())?;
        let _ = s3::delete_object(aws, &self.bucket, &key).await;
        match got {
            Some(bytes) if !bytes.is_empty() => Ok(bytes),
            _ => Err(format!(
                "no report from {instance} ({}{}): {}",
                match inv.status {
                    CommandStatus::Success => "exit 0".to_owned(),
                    CommandStatus::Failed => format!("exit {}", inv.exit_code.unwrap_or(-1)),
                    other => format!("{other:?}"),
                },
                if inv.stdout.trim().is_empty() {
                    String::new()
                } else {
                    format!(", {}", inv.stdout.trim())
                },
                last_line(&inv.stderr)
            )),
        }
    }
}

impl Executor for SsmExecutor<'_> {
    fn execute<'a>(
        &'a self,
        path: &'a RunPath,
        instance: usize,
        argv: &'a [String],
        limit: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>> {
        Box::pin(self.go(path, instance, argv, limit))
    }

    /// SSM Run Command takes a few seconds to reach an instance (more when the agent polls):
    /// the common start is set far enough ahead that every instance is waiting for it.
    fn start_lead(&self) -> Duration {
        SSM_START_LEAD
    }

    fn check_clocks<'a>(
        &'a self,
        path: &'a RunPath,
    ) -> BoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(self.clocks(path))
    }

    fn psk_file(&self, path: &RunPath) -> Option<String> {
        path.authenticated.then(|| self.layout.psk.clone())
    }

    fn path_mtu<'a>(
        &'a self,
        path: &'a RunPath,
    ) -> BoxFuture<'a, Option<Result<crate::run::mtu::PathMtu, String>>> {
        Box::pin(async move {
            let (region, instance) = self.clients.get(&path.label)?.first()?.clone();
            let r = self.d.aws.region(&region);
            let inv = ssm::run_script(
                self.d.run_command(),
                &r,
                &instance,
                &crate::run::mtu::script(&path.target),
                Duration::from_secs(60),
                self.d.timing().poll,
                &format!("xbench-deploy run: MTU of {}", path.label),
            )
            .await;
            Some(
                inv.map(|i| crate::run::mtu::parse(&path.target, &i.stdout))
                    .map_err(|e| e.to_string()),
            )
        })
    }
}

/// How far ahead of dispatch a fleet's common start is set on AWS.
pub const SSM_START_LEAD: Duration = Duration::from_secs(20);

/// The largest clock offset from NTP (chrony's `System time`) a fleet instance may have.
/// Two instances may then disagree by twice this, 100 ms: 1 % of a 10-second test's window,
/// the share of its bytes that the instances' windows may fail to overlap by — about what
/// the repeats of a cell already spread. On EC2, chrony against the Amazon Time Sync Service
/// keeps offsets in microseconds, so a host over this has a broken clock, and its runs are
/// refused rather than merged.
pub const MAX_CLOCK_OFFSET: Duration = Duration::from_millis(50);

impl SsmExecutor<'_> {
    /// Every fleet instance's `chronyc tracking`, through SSM: the largest offset, or why the
    /// fleet cannot start together.
    async fn clocks(&self, path: &RunPath) -> Result<Option<String>, String> {
        let fleet = self
            .clients
            .get(&path.label)
            .ok_or_else(|| format!("path {} has no client hosts", path.label))?;
        let mut offsets = Vec::new();
        for (region, instance) in fleet {
            let r = self.d.aws.region(region);
            let inv = ssm::run_script(
                self.d.run_command(),
                &r,
                instance,
                "chronyc tracking\n",
                Duration::from_secs(60),
                self.d.timing().poll,
                &format!("xbench-deploy run: clock of {}", path.label),
            )
            .await
            .map_err(|e| e.to_string())?;
            let offset = chrony_offset(&inv.stdout).ok_or_else(|| {
                format!(
                    "cannot read the clock offset of {instance} (`chronyc tracking` said: {}); a \
                     fleet starts at one instant and needs synchronised clocks",
                    last_line(&format!("{}\n{}", inv.stdout, inv.stderr))
                )
            })?;
            offsets.push((instance.clone(), offset));
        }
        let worst = offsets
            .iter()
            .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
            .cloned();
        let Some((instance, worst)) = worst else {
            return Ok(None);
        };
        let shown = offsets
            .iter()
            .map(|(i, o)| format!("{i} {:+.3} ms", o * 1e3))
            .collect::<Vec<_>>()
            .join(", ");
        if worst.abs() > MAX_CLOCK_OFFSET.as_secs_f64() {
            return Err(format!(
                "clock of {instance} is {:.1} ms off NTP (bound {} ms, so the fleet's windows \
                 overlap within 1 % of a 10 s test); offsets: {shown}",
                worst.abs() * 1e3,
                MAX_CLOCK_OFFSET.as_millis()
            ));
        }
        Ok(Some(format!("fleet clocks against NTP: {shown}")))
    }
}

/// The offset in `chronyc tracking`'s output, seconds, positive when the clock is fast:
/// `System time     : 0.000012345 seconds fast of NTP time`.
pub fn chrony_offset(text: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("System time"))?;
    let rest = line
        .split_once(':')?
        .1
        .split_whitespace()
        .collect::<Vec<_>>();
    let value: f64 = rest.first()?.parse().ok()?;
    match rest.get(2).copied() {
        Some("fast") => Some(value),
        Some("slow") => Some(-value),
        _ => None,
    }
}

fn last_line(s: &str) -> &str {
    s.trim().lines().last().unwrap_or("no output")
}

/// The script a client host runs: the test, then its report uploaded with the presigned PUT
/// (also a failed test's, which says why). Exits with xbench's status.
pub fn script(xbench: &str, argv: &[String], put: &s3::Presigned) -> String {
    let headers: String = put
        .headers
        .iter()
        .map(|(k, v)| format!(" -H {}", quote(&format!("{k}: {v}"))))
        .collect();
    format!(
        "out=$(mktemp); err=$(mktemp)\n\
         {} > \"$out\" 2> \"$err\"\n\
         rc=$?\n\
         if [ -s \"$out\" ]; then\n\
         \x20 curl -fsS --retry 3 --max-time 300 -X PUT{headers} --upload-file \"$out\" {} > /dev/null \\\n\
         \x20   || {{ echo 'xbench-deploy: uploading the report failed' >&2; rc=75; }}\n\
         fi\n\
         tail -c 4000 \"$err\" >&2\n\
         rm -f \"$out\" \"$err\"\n\
         exit $rc\n",
        command::shell_line(xbench, argv),
        quote(&put.url),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chrony_offsets_are_read_with_their_sign() {
        let fast = "Reference ID    : A9FEA97B (169.254.169.123)\n\
                    Stratum         : 4\n\
                    System time     : 0.000012345 seconds fast of NTP time\n\
                    Last offset     : -0.000001 seconds\n";
        assert_eq!(chrony_offset(fast), Some(0.000012345));
        let slow = "System time     : 0.250000000 seconds slow of NTP time\n";
        assert_eq!(chrony_offset(slow), Some(-0.25));
        assert_eq!(chrony_offset("506 Cannot talk to daemon\n"), None);
        assert_eq!(chrony_offset("System time : soon\n"), None);
    }
}
