//! Connecting to AWS: one SDK configuration, checked for credentials once, one EC2, SSM and S3
//! client per region and one IAM client built from it; plus the conversion of SDK errors into
//! [`Error::Aws`] with the operation, region and AWS's own message.
//!
//! The submodules hold the calls themselves: [`ec2`] (finding a run's resources, instance-type
//! and zone checks), [`ssm`] (AMI ids, the run's key, Run Command), [`s3`] (the run's bucket),
//! [`iam`] (the hosts' instance profile), and, behind traits because the moto emulator does not
//! implement them, [`accelerator`], [`placement`] and [`ssm::RunCommandApi`]. Not for deciding
//! what to create or delete (that is [`crate::apply`] and [`crate::teardown`]).

pub mod accelerator;
pub mod ec2;
pub mod gateways;
pub mod iam;
pub mod placement;
pub mod quotas;
pub mod s3;
pub mod ssm;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::ProvideCredentials;
use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_types::error::display::DisplayErrorContext;

use crate::error::Error;
use crate::regions;

/// A boxed future, for the object-safe traits of this module.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How to reach AWS.
#[derive(Debug, Clone, Default)]
pub struct AwsSettings {
    /// Send every request here instead of AWS (an emulator such as moto). The SDK also honours
    /// the `AWS_ENDPOINT_URL` environment variable on its own.
    pub endpoint_url: Option<String>,
    /// Shared-config profile to use instead of `AWS_PROFILE`/`default`.
    pub profile: Option<String>,
    /// Fixed credentials instead of the SDK's provider chain (tests).
    pub static_credentials: Option<StaticCredentials>,
    /// The SDK's first back-off after a throttled or failed call (it doubles, with jitter, up
    /// to 20 s) [default: 1 s]. Tests against an emulator that throttles use less.
    pub retry_backoff: Option<Duration>,
    /// Whether the run's bucket refuses requests that do not come over TLS [default: yes,
    /// unless the endpoint is plain `http://`, which such a bucket would refuse entirely].
    pub tls_only_buckets: Option<bool>,
}

/// How many times the SDK sends one call before giving up on throttling or a transient
/// failure: more than its default 3, since a teardown that stops on a throttled call leaves
/// resources billing; `down` retries above this too.
const SDK_MAX_ATTEMPTS: u32 = 6;

/// An access key pair. `Debug` never shows the secret.
#[derive(Clone)]
pub struct StaticCredentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
}

impl fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &"** redacted **")
            .field("secret_access_key", &"** redacted **")
            .finish()
    }
}

/// How often to poll and how long to wait for AWS to reach a state.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Pause between polls.
    pub poll: Duration,
    /// Longest wait for an instance to run or terminate, or a Transit Gateway, attachment or
    /// accelerator to become ready or deleted.
    pub timeout: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        // Transit Gateway attachments take several minutes to delete, and accelerators up to
        // about ten to deploy a change.
        Timing {
            poll: Duration::from_secs(5),
            timeout: Duration::from_secs(20 * 60),
        }
    }
}

impl Timing {
    /// Timing for an emulator, where every state change is immediate.
    pub fn fast() -> Self {
        Timing {
            poll: Duration::from_millis(20),
            timeout: Duration::from_secs(30),
        }
    }

    /// Polls `check` until it yields `Some`, or fails with [`Error::Timeout`].
    pub async fn wait<T, F, Fut>(&self, what: &str, region: &str, mut check: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<T>, Error>>,
    {
        let start = Instant::now();
        loop {
            if let Some(v) = check().await? {
                return Ok(v);
            }
            if start.elapsed() >= self.timeout {
                return Err(Error::Timeout {
                    what: what.to_owned(),
                    region: region.to_owned(),
                    seconds: self.timeout.as_secs(),
                });
            }
            tokio::time::sleep(self.poll).await;
        }
    }
}

/// The clients for one region.
#[derive(Debug, Clone)]
pub struct RegionClients {
    /// Region name.
    pub region: String,
    /// EC2.
    pub ec2: aws_sdk_ec2::Client,
    /// SSM (AMI parameters, the run's key, Run Command).
    pub ssm: aws_sdk_ssm::Client,
    /// S3 (the run's bucket, when it is in this region).
    pub s3: aws_sdk_s3::Client,
    /// Service Quotas (the vCPU quota `plan --check` and `up` compare the plan with).
    pub quotas: aws_sdk_servicequotas::Client,
}

/// A connection to AWS: configuration checked for credentials, and clients per region.
#[derive(Debug)]
pub struct Aws {
    config: SdkConfig,
    /// An emulator's address: S3 then needs path-style URLs (`http://host/bucket/key`), since
    /// bucket subdomains of `127.0.0.1` do not resolve.
    path_style: bool,
    /// Whether buckets get the TLS-only policy (see [`AwsSettings::tls_only_buckets`]).
    tls_only_buckets: bool,
    clients: Mutex<HashMap<String, RegionClients>>,
}

impl Aws {
    /// Loads the SDK configuration and checks that credentials can be found.
    pub async fn connect(settings: &AwsSettings) -> Result<Aws, Error> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(regions::ACCELERATOR_API_REGION));
        if let Some(url) = &settings.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        if let Some(p) = &settings.profile {
            loader = loader.profile_name(p);
        }
        loader = loader.retry_config(
            aws_config::retry::RetryConfig::standard()
                .with_max_attempts(SDK_MAX_ATTEMPTS)
                .with_initial_backoff(settings.retry_backoff.unwrap_or(Duration::from_secs(1))),
        );
        if let Some(c) = &settings.static_credentials {
            loader = loader.credentials_provider(aws_sdk_ec2::config::Credentials::new(
                &c.access_key_id,
                &c.secret_access_key,
                None,
                None,
                "xbench-deploy-static",
            ));
        }
        let config = loader.load().await;
        let Some(provider) = config.credentials_provider() else {
            return Err(Error::MissingCredentials {
                detail: "no credentials provider is configured".into(),
            });
        };
        // Asking once up front turns "no credentials" into one clear message instead of a
        // dispatch failure on the first call. The credentials themselves are dropped here.
        if let Err(e) = provider.provide_credentials().await {
            // The top-level message only: the chain's Debug form repeats every attempt.
            return Err(Error::MissingCredentials {
                detail: e.to_string(),
            });
        }
        let path_style =
            settings.endpoint_url.is_some() || std::env::var_os("AWS_ENDPOINT_URL").is_some();
        let endpoint = settings
            .endpoint_url
            .clone()
            .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
        let tls_only_buckets = settings
            .tls_only_buckets
            .unwrap_or_else(|| !endpoint.is_some_and(|e| e.starts_with("http://")));
        Ok(Aws {
            config,
            path_style,
            tls_only_buckets,
            clients: Mutex::new(HashMap::new()),
        })
    }

    /// Whether the run's bucket refuses non-TLS requests.
    pub fn tls_only_buckets(&self) -> bool {
        self.tls_only_buckets
    }

    /// The shared SDK configuration (for clients of other services).
    pub fn sdk_config(&self) -> &SdkConfig {
        &self.config
    }

    /// The clients for `region`, made on first use.
    pub fn region(&self, region: &str) -> RegionClients {
        let mut map = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.entry(region.to_owned())
            .or_insert_with(|| {
                let ec2 = aws_sdk_ec2::config::Builder::from(&self.config)
                    .region(Region::new(region.to_owned()))
                    .build();
                let ssm = aws_sdk_ssm::config::Builder::from(&self.config)
                    .region(Region::new(region.to_owned()))
                    .build();
                let s3 = aws_sdk_s3::config::Builder::from(&self.config)
                    .region(Region::new(region.to_owned()))
                    .force_path_style(self.path_style)
                    .build();
                let quotas = aws_sdk_servicequotas::config::Builder::from(&self.config)
                    .region(Region::new(region.to_owned()))
                    .build();
                RegionClients {
                    quotas: aws_sdk_servicequotas::Client::from_conf(quotas),
                    region: region.to_owned(),
                    ec2: aws_sdk_ec2::Client::from_conf(ec2),
                    ssm: aws_sdk_ssm::Client::from_conf(ssm),
                    s3: aws_sdk_s3::Client::from_conf(s3),
                }
            })
            .clone()
    }

    /// The IAM client (IAM is global; its endpoint is in us-east-1).
    pub fn iam(&self) -> aws_sdk_iam::Client {
        let conf = aws_sdk_iam::config::Builder::from(&self.config)
            .region(Region::new("us-east-1"))
            .build();
        aws_sdk_iam::Client::from_conf(conf)
    }

    /// Every region the account can use (DescribeRegions), for `gc`.
    pub async fn all_regions(&self) -> Result<Vec<String>, Error> {
        let r = self.region(regions::ACCELERATOR_API_REGION);
        let out = r
            .ec2
            .describe_regions()
            .send()
            .await
            .map_err(|e| aws_error("DescribeRegions", &r.region, e))?;
        let mut names: Vec<String> = out
            .regions()
            .iter()
            .filter_map(|r| r.region_name().map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
    }
}

/// Turns an SDK error into [`Error::Aws`], keeping AWS's code and message.
pub fn aws_error<E>(operation: &'static str, region: &str, e: SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let code = e.code().map(str::to_owned);
    let message = match (e.message(), &e) {
        (Some(m), _) => m.to_owned(),
        (None, SdkError::ServiceError(_)) => DisplayErrorContext(&e).to_string(),
        // An answer that is not AWS's format: say so briefly rather than dumping the response.
        (None, SdkError::ResponseError(r)) => format!(
            "the endpoint answered HTTP {} with something that is not an AWS response (is this service available there?)",
            r.raw().status().as_u16()
        ),
        (None, SdkError::TimeoutError(_)) => "no answer in time".to_owned(),
        // The endpoint could not be reached (or dropped the connection): its causes in words,
        // without the SDK's Debug dump.
        (None, SdkError::DispatchFailure(_)) => {
            let mut words = vec!["no answer from the endpoint".to_owned()];
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                let w = c.to_string();
                if !words.iter().any(|x| x.contains(&w)) {
                    words.push(w);
                }
                cause = c.source();
            }
            words.join(": ")
        }
        (None, _) => DisplayErrorContext(&e).to_string(),
    };
    Error::Aws {
        operation,
        region: region.to_owned(),
        code,
        message,
    }
}
