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
    /// Path label → (region, instance id) of its client host.
    clients: BTreeMap<String, (String, String)>,
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
                    clients.insert(p.label.clone(), (h.region.clone(), h.instance_id.clone()));
                    None
                }
                None => Some(format!(
                    "its client is your host{}: run `{} --save DIR` there{}",
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
        argv: &[String],
        limit: Duration,
    ) -> Result<Vec<u8>, String> {
        let (region, instance) = self
            .clients
            .get(&path.label)
            .ok_or_else(|| format!("path {} has no client host", path.label))?;
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
        argv: &'a [String],
        limit: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>> {
        Box::pin(self.go(path, argv, limit))
    }

    fn psk_file(&self, path: &RunPath) -> Option<String> {
        path.authenticated.then(|| self.layout.psk.clone())
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
