//! Shared test harness: a real server on a free loopback port in this process, stopped (and
//! its tasks drained) when the handle drops out of scope via `stop()`.

#![allow(dead_code)] // each test binary uses part of the harness
#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use xbench::proto::{self, Channel, Hello, Message, MessageReader, PREAMBLE_LEN, Preamble};
use xbench::{ClientConfig, EndCondition, Limits, Server, ServerConfig, TestReport};

pub(crate) struct TestServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), xbench::Error>>>,
}

impl TestServer {
    pub(crate) async fn start() -> Self {
        Self::with_limits(Limits::default()).await
    }

    pub(crate) async fn with_limits(limits: Limits) -> Self {
        Self::with_config(ServerConfig {
            limits,
            ..ServerConfig::default()
        })
        .await
    }

    /// A server with `config`, on a free loopback port.
    pub(crate) async fn with_config(config: ServerConfig) -> Self {
        raise_fd_limit();
        let server = Server::bind(ServerConfig {
            bind: vec!["127.0.0.1".parse().unwrap()],
            port: 0,
            shutdown_grace: Duration::from_secs(1),
            ..config
        })
        .await
        .unwrap();
        let addr = server.local_addrs()[0];
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub(crate) fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new("127.0.0.1");
        c.port = self.addr.port();
        c.spec.end = EndCondition::Duration(Duration::from_millis(600));
        c.spec.interval = Some(Duration::from_millis(200));
        c
    }

    pub(crate) async fn run(&self, config: &ClientConfig) -> TestReport {
        xbench::client::run(config, &mut |_| {}, std::future::pending())
            .await
            .unwrap()
    }

    pub(crate) async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("server stops within 10 s")
                .unwrap()
                .unwrap();
        }
    }
}

/// Open file descriptors of this process.
pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Threads of this process.
pub(crate) fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Waits up to `limit` for `f` to hold, polling.
pub(crate) async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if std::time::Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Thousands of connections in one test process need more than the usual 1024 descriptors.
pub(crate) fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// The two halves of a control connection opened by hand.
pub(crate) type Control = (
    MessageReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
);

/// Speaks the control preamble over `s` and checks that a server answers.
pub(crate) async fn control_on(s: TcpStream) -> Control {
    let (rd, mut wr) = s.into_split();
    let mut rd = MessageReader::new(rd);
    wr.write_all(&Preamble::new(Channel::Control).encode())
        .await
        .unwrap();
    let mut pre = [0u8; PREAMBLE_LEN];
    rd.inner_mut().read_exact(&mut pre).await.unwrap();
    assert_eq!(Preamble::decode(&pre).unwrap().channel, Channel::Server);
    (rd, wr)
}

/// [`control_on`], then a hello as `name`; returns the server's answer with the halves.
pub(crate) async fn greet_on(
    s: TcpStream,
    name: &str,
) -> (
    MessageReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
    Option<Message>,
) {
    let (mut rd, mut wr) = control_on(s).await;
    // A client of before the extensions: it never gets a `host` message.
    let hello = Hello {
        software: name.into(),
        nonce: xbench::auth::Nonce::random().unwrap(),
        extensions: Vec::new(),
    };
    proto::write_message(&mut wr, &Message::Hello(hello))
        .await
        .unwrap();
    let answer = rd.next().await.ok().flatten();
    (rd, wr, answer)
}
