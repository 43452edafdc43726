//! What a run has besides its network, made first: the hosts' instance profile (the SSM agent,
//! the run's key and binary; or yours), the private bucket holding the xbench binary (which
//! hosts copy with their profile),
//! and the run's pre-shared key in every region's Parameter Store. Each is found again on a
//! resumed run; the key in particular is reused, since hosts launched earlier already hold it.

use tracing::info;

use super::Build;
use crate::aws::{iam, s3, ssm};
use crate::error::Error;
use crate::scenario::XbenchInstall;
use crate::userdata::Fetch;

impl Build<'_> {
    pub(super) async fn artifacts(&self) -> Result<(), Error> {
        let profile = match &self.instance_profile {
            Some(name) => {
                iam::check_existing(&self.d.aws, name).await?;
                info!("instance profile {name} (yours, --instance-profile)");
                name.clone()
            }
            None => {
                let p = iam::ensure(&self.d.aws, self.tags).await?;
                info!("instance profile {p} (SSM agent, the run's key and binary only)");
                p
            }
        };
        self.ids().profile = Some(profile);
        let fetch = self.binary().await?;
        self.ids().fetch = Some(fetch);
        self.psk().await
    }

    /// The run's bucket (results come back through it, whatever the binary's source), and how
    /// xbench hosts get the binary: uploaded there and fetched through a presigned URL, or
    /// the scenario's own URL or git repository.
    async fn binary(&self) -> Result<Fetch, Error> {
        let home = self
            .plan
            .regions()
            .first()
            .cloned()
            .ok_or_else(|| Error::Internal("a plan without regions".into()))?;
        let bucket = s3::ensure(&self.d.aws, &home, self.tags).await?;
        {
            let mut l = self
                .local
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            l.bucket = Some(bucket.clone());
            self.d.state.save(&self.tags.run, &l)?;
        }
        self.ids().bucket = Some(bucket.clone());
        match &self.s.xbench {
            XbenchInstall::Url { url, sha256 } => Ok(Fetch::Url {
                url: url.clone(),
                sha256: sha256.clone(),
            }),
            XbenchInstall::CargoGit { git, rev } => Ok(Fetch::Cargo {
                git: git.clone(),
                rev: rev.clone(),
            }),
            XbenchInstall::Upload => {
                let bin = self
                    .xbench
                    .ok_or_else(|| Error::Internal("no xbench binary to upload".into()))?;
                s3::upload(&self.d.aws, &bucket, s3::BINARY_KEY, &bin.path).await?;
                info!(
                    "uploaded {} ({} bytes, sha256 {}) to s3://{}/{}",
                    bin.path.display(),
                    bin.size,
                    bin.sha256,
                    bucket.name,
                    s3::BINARY_KEY
                );
                // Names this tool made: lowercase hex, dashes and the fixed key, shell-safe.
                Ok(Fetch::S3 {
                    bucket: bucket.name.clone(),
                    key: s3::BINARY_KEY.to_owned(),
                    region: bucket.region.clone(),
                    sha256: bin.sha256.clone(),
                })
            }
        }
    }

    /// The run's key: the one already stored (a resumed run), else a new one from the OS's
    /// generator; stored as a SecureString in every region of the run.
    async fn psk(&self) -> Result<(), Error> {
        let regions = self.plan.regions();
        let mut key = None;
        let mut missing = Vec::new();
        for region in &regions {
            let r = self.d.aws.region(region);
            match ssm::get_psk(&r, &self.tags.run).await? {
                Some(k) => key = key.or(Some(k)),
                None => missing.push(r),
            }
        }
        let key = match key {
            Some(k) => k,
            None => {
                let mut bytes = [0u8; 32];
                getrandom::fill(&mut bytes)
                    .map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
                bytes.iter().map(|b| format!("{b:02x}")).collect()
            }
        };
        for r in missing {
            ssm::put_psk(&r, self.tags, &key).await?;
            info!(
                "stored the run's key as SecureString {} in {}",
                ssm::psk_parameter(&self.tags.run),
                r.region
            );
        }
        Ok(())
    }
}
