//! Test harness: a private `moto_server` per test on a free loopback port (killed on drop, also
//! when the test panics), a [`Deployer`] pointed at it with test credentials, and an
//! independent leftover check that lists every region through the SDK directly.

#![allow(dead_code, unreachable_pub)]
// each test file uses a different part
// Test support: a failed step is a failed test, with its panic message and backtrace.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region};
use xbench_deploy::Deployer;
use xbench_deploy::apply::UpOptions;
use xbench_deploy::aws::accelerator::FakeAccelerators;
use xbench_deploy::aws::placement::FakePlacementGroups;
use xbench_deploy::aws::ssm::FakeRunCommand;
use xbench_deploy::aws::{Aws, AwsSettings, StaticCredentials, Timing};
use xbench_deploy::binary::XbenchBinary;
use xbench_deploy::state::StateDir;

/// The moto version CI installs (deploy/requirements-test.txt).
pub const MOTO_PIN: &str = "moto[server,ec2,s3,iam,ssm]==5.2.5";

/// Credentials for the emulator. Distinctive, so a test can prove they are never printed.
pub const TEST_KEY_ID: &str = "AKIAXBENCHTESTKEY0042";
pub const TEST_SECRET: &str = "xbench/TEST/secret+never+printed+0042aB";

/// A running moto_server.
pub struct Moto {
    child: Child,
    pub endpoint: String,
    _log: tempfile_path::TempDir,
}

/// Minimal temp dirs without a dependency.
pub mod tempfile_path {
    use std::path::{Path, PathBuf};

    pub struct TempDir(PathBuf);

    impl TempDir {
        pub fn new(tag: &str) -> TempDir {
            let mut bytes = [0u8; 6];
            getrandom::fill(&mut bytes).unwrap();
            let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let p = std::env::temp_dir().join(format!("xbench-deploy-test-{tag}-{name}"));
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub use tempfile_path::TempDir;

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

fn free_port() -> u16 {
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Moto {
    /// Starts moto_server, or returns `None` (with a notice) when it is not installed and this
    /// is not CI. In CI (`CI=true`) a missing moto_server fails the test.
    pub fn start() -> Option<Moto> {
        let Some(bin) = find_on_path("moto_server") else {
            let msg = format!(
                "moto_server is not on PATH; install it with: pip install '{MOTO_PIN}'  (or: pip install -r deploy/requirements-test.txt)"
            );
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{msg}");
            }
            eprintln!("SKIPPED: {msg}");
            return None;
        };
        for _ in 0..5 {
            let port = free_port();
            let log = TempDir::new("moto");
            let out = std::fs::File::create(log.path().join("moto.log")).unwrap();
            let mut child = Command::new(&bin)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                // AWS's managed policies (AmazonSSMManagedInstanceCore), which `up` attaches.
                .env("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .expect("start moto_server");
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // lost the port to someone else: try another
                }
                if TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
                    return Some(Moto {
                        child,
                        endpoint: format!("http://127.0.0.1:{port}"),
                        _log: log,
                    });
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("moto_server did not listen on {port} within 60 s");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        panic!("could not start moto_server on a free port");
    }

    pub fn settings(&self) -> AwsSettings {
        AwsSettings {
            endpoint_url: Some(self.endpoint.clone()),
            profile: None,
            static_credentials: Some(StaticCredentials {
                access_key_id: TEST_KEY_ID.into(),
                secret_access_key: TEST_SECRET.into(),
            }),
            retry_backoff: Some(Duration::from_millis(20)),
            tls_only_buckets: None,
        }
    }

    /// A deployer on this emulator with fakes for what moto lacks; its hosts (Run Command)
    /// report a finished boot and answer every probe.
    pub async fn deployer(
        &self,
        state: &Path,
    ) -> (Deployer, Arc<FakeAccelerators>, Arc<FakePlacementGroups>) {
        self.deployer_with(state, Arc::new(booted_hosts())).await
    }

    /// As [`Moto::deployer`], with these hosts.
    pub async fn deployer_with(
        &self,
        state: &Path,
        hosts: Arc<FakeRunCommand>,
    ) -> (Deployer, Arc<FakeAccelerators>, Arc<FakePlacementGroups>) {
        let aws = Aws::connect(&self.settings()).await.unwrap();
        let accel = Arc::new(FakeAccelerators::new(2));
        let pg = Arc::new(FakePlacementGroups::default());
        let d = Deployer::new(aws, StateDir::new(state))
            .with_accelerators(accel.clone())
            .with_placement_groups(pg.clone())
            .with_run_command(hosts)
            .with_timing(Timing::fast())
            .with_ready_timeout(Duration::from_secs(5));
        (d, accel, pg)
    }

    async fn conf(&self, region: &str) -> aws_config::SdkConfig {
        aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(region.to_owned()))
            .endpoint_url(&self.endpoint)
            .credentials_provider(aws_sdk_ec2::config::Credentials::new(
                TEST_KEY_ID,
                TEST_SECRET,
                None,
                None,
                "test",
            ))
            .load()
            .await
    }

    /// An S3 client, built independently of the code under test.
    pub async fn s3(&self, region: &str) -> aws_sdk_s3::Client {
        let conf = aws_sdk_s3::config::Builder::from(&self.conf(region).await)
            .force_path_style(true)
            .build();
        aws_sdk_s3::Client::from_conf(conf)
    }

    /// An IAM client, built independently of the code under test.
    pub async fn iam(&self) -> aws_sdk_iam::Client {
        aws_sdk_iam::Client::new(&self.conf("us-east-1").await)
    }

    /// An SSM client, built independently of the code under test.
    pub async fn ssm(&self, region: &str) -> aws_sdk_ssm::Client {
        aws_sdk_ssm::Client::new(&self.conf(region).await)
    }

    /// Buckets, IAM roles and instance profiles, and SSM parameters under /xbench/ in
    /// `regions`: what a run leaves besides its network.
    pub async fn artifacts_left(&self, regions: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        for b in self
            .s3("us-east-1")
            .await
            .list_buckets()
            .send()
            .await
            .unwrap()
            .buckets()
        {
            out.push(format!("s3 bucket {}", b.name().unwrap_or_default()));
        }
        let iam = self.iam().await;
        for r in iam.list_roles().send().await.unwrap().roles() {
            out.push(format!("iam role {}", r.role_name()));
        }
        for p in iam
            .list_instance_profiles()
            .send()
            .await
            .unwrap()
            .instance_profiles()
        {
            out.push(format!(
                "iam instance profile {}",
                p.instance_profile_name()
            ));
        }
        for region in regions {
            let params = self
                .ssm(region)
                .await
                .describe_parameters()
                .send()
                .await
                .unwrap();
            for p in params.parameters() {
                if p.name().is_some_and(|n| n.starts_with("/xbench/")) {
                    out.push(format!(
                        "{region} ssm parameter {}",
                        p.name().unwrap_or_default()
                    ));
                }
            }
        }
        out
    }

    /// An EC2 client for `region`, built independently of the code under test.
    pub async fn ec2(&self, region: &str) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(&self.conf(region).await)
    }

    /// Everything left in every region that is not an account default: instances not
    /// terminated, non-default VPCs, subnets, route tables, gateways and groups, live peerings,
    /// Transit Gateways and attachments; and buckets, IAM roles and profiles, and the runs'
    /// keys in Parameter Store. Tests create nothing else, so this must be empty after a
    /// teardown (a stricter check than "no tagged resource").
    pub async fn leftovers(&self) -> Vec<String> {
        let regions: Vec<String> = self
            .ec2("us-east-1")
            .await
            .describe_regions()
            .send()
            .await
            .unwrap()
            .regions()
            .iter()
            .filter_map(|r| r.region_name().map(str::to_owned))
            .collect();
        assert!(regions.len() > 10, "moto lists every region");
        let mut out = Vec::new();
        for region in &regions {
            out.extend(self.leftovers_in(region).await);
        }
        let names: Vec<&str> = regions.iter().map(String::as_str).collect();
        out.extend(self.artifacts_left(&names).await);
        out
    }

    pub async fn leftovers_in(&self, region: &str) -> Vec<String> {
        let c = self.ec2(region).await;
        let mut out = Vec::new();
        let vpcs = c.describe_vpcs().send().await.unwrap();
        let default_vpcs: Vec<String> = vpcs
            .vpcs()
            .iter()
            .filter(|v| v.is_default() == Some(true))
            .filter_map(|v| v.vpc_id().map(str::to_owned))
            .collect();
        for v in vpcs.vpcs().iter().filter(|v| v.is_default() != Some(true)) {
            out.push(format!("{region} vpc {}", v.vpc_id().unwrap_or_default()));
        }
        let not_default =
            |vpc: Option<&str>| !vpc.is_some_and(|v| default_vpcs.iter().any(|d| d == v));
        for s in c.describe_subnets().send().await.unwrap().subnets() {
            if not_default(s.vpc_id()) {
                out.push(format!(
                    "{region} subnet {}",
                    s.subnet_id().unwrap_or_default()
                ));
            }
        }
        for r in c.describe_instances().send().await.unwrap().reservations() {
            for i in r.instances() {
                if i.state().and_then(|s| s.name()).map(|n| n.as_str()) != Some("terminated") {
                    out.push(format!(
                        "{region} instance {}",
                        i.instance_id().unwrap_or_default()
                    ));
                }
            }
        }
        for t in c
            .describe_route_tables()
            .send()
            .await
            .unwrap()
            .route_tables()
        {
            if not_default(t.vpc_id()) {
                out.push(format!(
                    "{region} route table {}",
                    t.route_table_id().unwrap_or_default()
                ));
            }
        }
        for g in c
            .describe_internet_gateways()
            .send()
            .await
            .unwrap()
            .internet_gateways()
        {
            let on_default = g.attachments().iter().any(|a| !not_default(a.vpc_id()));
            if !on_default {
                out.push(format!(
                    "{region} internet gateway {}",
                    g.internet_gateway_id().unwrap_or_default()
                ));
            }
        }
        for g in c
            .describe_security_groups()
            .send()
            .await
            .unwrap()
            .security_groups()
        {
            if not_default(g.vpc_id()) {
                out.push(format!(
                    "{region} security group {}",
                    g.group_id().unwrap_or_default()
                ));
            }
        }
        for p in c
            .describe_vpc_peering_connections()
            .send()
            .await
            .unwrap()
            .vpc_peering_connections()
        {
            let code = p
                .status()
                .and_then(|s| s.code())
                .map(|c| c.as_str().to_owned());
            if !matches!(code.as_deref(), Some("deleted" | "rejected")) {
                out.push(format!(
                    "{region} vpc peering {}",
                    p.vpc_peering_connection_id().unwrap_or_default()
                ));
            }
        }
        for t in c
            .describe_transit_gateways()
            .send()
            .await
            .unwrap()
            .transit_gateways()
        {
            if t.state().map(|s| s.as_str()) != Some("deleted") {
                out.push(format!(
                    "{region} transit gateway {}",
                    t.transit_gateway_id().unwrap_or_default()
                ));
            }
        }
        for a in c
            .describe_transit_gateway_attachments()
            .send()
            .await
            .unwrap()
            .transit_gateway_attachments()
        {
            if a.state().map(|s| s.as_str()) != Some("deleted") {
                out.push(format!(
                    "{region} tgw attachment {}",
                    a.transit_gateway_attachment_id().unwrap_or_default()
                ));
            }
        }
        out
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts moto or returns from the test (skipped, outside CI).
#[macro_export]
macro_rules! moto_or_skip {
    () => {
        match common::Moto::start() {
            Some(m) => m,
            None => return,
        }
    };
}

/// Hosts that report a finished boot and answer every probe (what a healthy run looks like
/// through SSM).
pub fn booted_hosts() -> FakeRunCommand {
    FakeRunCommand::new(|_, script| {
        if script.contains("boot-status") {
            (0, "ok\n".into(), String::new())
        } else {
            (0, String::new(), String::new())
        }
    })
}

/// A tiny x86_64 ELF executable header: enough for `up` to check and upload (moto runs no
/// instance).
pub fn fake_xbench(dir: &Path) -> XbenchBinary {
    let mut b = vec![0u8; 64 + 56];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2;
    b[5] = 1;
    b[18..20].copy_from_slice(&62u16.to_le_bytes());
    b[32..40].copy_from_slice(&64u64.to_le_bytes());
    b[54..56].copy_from_slice(&56u16.to_le_bytes());
    b[56..58].copy_from_slice(&1u16.to_le_bytes());
    b[64..68].copy_from_slice(&1u32.to_le_bytes());
    let p = dir.join("xbench");
    std::fs::write(&p, b).unwrap();
    XbenchBinary::inspect(&p).unwrap()
}

/// `up` options with a binary to upload.
pub fn up_options(dir: &Path) -> UpOptions {
    UpOptions {
        xbench: Some(fake_xbench(dir)),
        ..UpOptions::default()
    }
}

/// The sha256 the scenarios' `[xbench] url` gives (the file is never downloaded: moto runs
/// no instance).
pub const URL_SHA256: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Two regions, the given path tables appended.
pub fn two_regions(name: &str, paths: &str) -> String {
    format!(
        r#"
name = "{name}"
instance_type = "m5.large"
ttl_hours = 2
# moto has none of Canonical's public parameters (the default ubuntu-24.04); no instance runs.
gateway_ami = "al2023"
[xbench]
url = "https://example.com/xbench"
sha256 = "{URL_SHA256}"
[[vpc]]
region = "us-east-1"
cidr = "10.10.0.0/16"
[[vpc]]
region = "ap-southeast-2"
cidr = "10.20.0.0/16"
{paths}
"#
    )
}

/// Two VPCs in one region (the latency report's layout).
pub fn one_region(name: &str, paths: &str) -> String {
    format!(
        r#"
name = "{name}"
instance_type = "m7i.large"
[[vpc]]
name = "a"
region = "ap-northeast-1"
cidr = "10.100.0.0/16"
[[vpc]]
name = "b"
region = "ap-northeast-1"
cidr = "10.101.0.0/16"
{paths}
"#
    )
}

/// Returns false (after saying why) when this process cannot build namespaces; under
/// `CI=true` panics instead: CI must run root tests, never skip them.
pub fn root_or_skip(test: &str) -> bool {
    if xbench_lab::sys::privilege::sufficient() {
        return true;
    }
    let why = xbench_lab::sys::privilege::check()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} needs root and CI=true forbids skipping it: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// Held for the whole of a root test: the lock every root test of the project takes, so
/// the timing-sensitive lab tests never share the machine with this one.
pub struct Serial(std::fs::File);

/// Waits for the other root tests to finish.
pub fn serial() -> Serial {
    use std::os::fd::AsRawFd as _;
    let f = std::fs::File::create(std::env::temp_dir().join("xbench-lab-root-tests.lock")).unwrap();
    // SAFETY: flock on an open descriptor; blocks until the lock is ours.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    Serial(f)
}

/// The `xbench` built beside this test (target/debug/xbench), which `cargo test --workspace`
/// builds before running any test.
pub fn xbench_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("xbench"))
        .unwrap();
    assert!(
        p.is_file(),
        "{} is missing: build it first with `cargo build -p xbench-cli` (cargo test --workspace does)",
        p.display()
    );
    p
}

/// `deploy/tests/fault_proxy.py` in front of a moto_server: every call recorded, faults as its
/// config file says (rewritten with [`FaultProxy::set`]). Killed on drop.
pub struct FaultProxy {
    child: Child,
    pub endpoint: String,
    dir: TempDir,
}

impl FaultProxy {
    /// Starts the proxy in front of `moto`, with no fault.
    pub fn start(moto: &Moto) -> FaultProxy {
        let dir = TempDir::new("proxy");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fault_proxy.py");
        let config = dir.path().join("faults.json");
        std::fs::write(&config, "{}").unwrap();
        let port_file = dir.path().join("port");
        let log = std::fs::File::create(dir.path().join("proxy.log")).unwrap();
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(&moto.endpoint)
            .arg(&config)
            .arg(dir.path().join("calls.jsonl"))
            .arg(&port_file)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start python3 fault_proxy.py");
        let deadline = Instant::now() + Duration::from_secs(60);
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                break p.trim().parse::<u16>().unwrap();
            }
            if let Ok(Some(s)) = child.try_wait() {
                panic!(
                    "fault_proxy.py exited ({s}): {}",
                    std::fs::read_to_string(dir.path().join("proxy.log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "fault_proxy.py did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        FaultProxy {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }

    /// Replaces the faults (JSON, see fault_proxy.py); `{}` for none.
    pub fn set(&self, faults: &str) {
        let tmp = self.dir.path().join("faults.json.tmp");
        std::fs::write(&tmp, faults).unwrap();
        std::fs::rename(&tmp, self.dir.path().join("faults.json")).unwrap();
    }

    /// Every call seen so far: (service, action, region).
    pub fn calls(&self) -> Vec<(String, String, String)> {
        let text = std::fs::read_to_string(self.dir.path().join("calls.jsonl")).unwrap_or_default();
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
                (s("service"), s("action"), s("region"))
            })
            .collect()
    }

    /// Forgets the calls seen so far.
    pub fn clear_calls(&self) {
        let _ = std::fs::remove_file(self.dir.path().join("calls.jsonl"));
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
