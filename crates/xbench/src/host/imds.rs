//! Where an EC2 host is: its instance type, region and Availability Zone ID, from the instance
//! metadata service in its version 2 (a session token from `PUT /latest/api/token`, then each
//! `GET` with it), within a budget of 100 ms all told.
//!
//! Off EC2 nothing answers at 169.254.169.254, or something else does: either gives `None`
//! once the budget is spent, never a wait anywhere else (no DNS, no retry, no IMDSv1). The
//! AWS SDKs' environment variables apply: `AWS_EC2_METADATA_DISABLED=true` turns it off and
//! `AWS_EC2_METADATA_SERVICE_ENDPOINT=http://ADDR[:PORT]` moves it (an IP address: a name
//! would need a resolver, whose wait the budget cannot bound). Not for: anything else IMDS
//! knows.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::report::Placement;

/// All the time IMDS gets, connections included.
pub const BUDGET: Duration = Duration::from_millis(100);

/// IMDS's address on every EC2 instance (IPv4; the IPv6 one is opt-in).
pub const DEFAULT_ENDPOINT: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)), 80);

/// Largest answer read: the values asked for are a few dozen bytes.
const MAX_ANSWER: usize = 4096;

/// Where to ask, from the environment: `None` when IMDS is turned off or the endpoint given
/// is not `http://` and an IP address.
pub fn endpoint_from_env() -> Option<SocketAddr> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if var("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return None;
    }
    match var("AWS_EC2_METADATA_SERVICE_ENDPOINT") {
        None => Some(DEFAULT_ENDPOINT),
        Some(url) => parse_endpoint(&url),
    }
}

/// `http://169.254.169.254`, `http://[fd00:ec2::254]:80/`, `http://127.0.0.1:8080`.
fn parse_endpoint(url: &str) -> Option<SocketAddr> {
    let rest = url.trim().strip_prefix("http://")?.trim_end_matches('/');
    if let Ok(sa) = rest.parse::<SocketAddr>() {
        return Some(sa);
    }
    let ip = rest.trim_start_matches('[').trim_end_matches(']');
    ip.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 80))
}

/// What this process learned of `endpoint` already: `Some(answer)` once asked.
pub fn known(endpoint: SocketAddr) -> Option<Option<Placement>> {
    cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(e, _)| *e == endpoint)
        .map(|(_, p)| p.clone())
}

/// The host's placement, asked of IMDS at `endpoint` once per process (the host does not
/// move); `None` off EC2, or when it did not answer within the budget.
pub fn placement_cached(endpoint: SocketAddr) -> Option<Placement> {
    if let Some(p) = known(endpoint) {
        return p;
    }
    let p = placement(endpoint, BUDGET).ok();
    cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((endpoint, p.clone()));
    p
}

/// Each endpoint asked, with its answer.
type Answers = Mutex<Vec<(SocketAddr, Option<Placement>)>>;

fn cache() -> &'static Answers {
    static CACHE: OnceLock<Answers> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(Vec::new()))
}

/// Asks IMDS at `endpoint` for the placement, all within `budget`.
pub fn placement(endpoint: SocketAddr, budget: Duration) -> io::Result<Placement> {
    let deadline = Instant::now() + budget;
    let token = request(
        endpoint,
        deadline,
        "PUT",
        "/latest/api/token",
        "X-aws-ec2-metadata-token-ttl-seconds: 60",
    )?;
    let auth = format!("X-aws-ec2-metadata-token: {}", token.trim());
    let get = |path: &str| request(endpoint, deadline, "GET", path, &auth);
    Ok(Placement {
        instance_type: get("/latest/meta-data/instance-type")?,
        region: get("/latest/meta-data/placement/region")?,
        availability_zone_id: get("/latest/meta-data/placement/availability-zone-id")?,
    })
}

/// One HTTP/1.1 request on its own connection; the body of a 200 answer.
fn request(
    endpoint: SocketAddr,
    deadline: Instant,
    method: &str,
    path: &str,
    header: &str,
) -> io::Result<String> {
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "IMDS budget spent"))
    };
    let mut s = TcpStream::connect_timeout(&endpoint, left()?)?;
    s.set_nodelay(true)?;
    s.set_write_timeout(Some(left()?))?;
    let host = match endpoint.ip() {
        IpAddr::V6(ip) => format!("[{ip}]"),
        IpAddr::V4(ip) => ip.to_string(),
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{header}\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        s.set_read_timeout(Some(left()?))?;
        let n = s.read(&mut buf)?;
        let eof = n == 0 || answer.len() + n > MAX_ANSWER;
        answer.extend_from_slice(&buf[..n]);
        if let Some(body) = complete_body(&answer, eof)? {
            return Ok(body);
        }
        if eof {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "IMDS answer cut short",
            ));
        }
    }
}

/// The body of a complete `200` answer, `None` while more is to come, an error for any other
/// status; `eof`: the connection closed after `answer`.
fn complete_body(answer: &[u8], eof: bool) -> io::Result<Option<String>> {
    let text = String::from_utf8_lossy(answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Ok(None);
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or(0);
    if status != 200 {
        return Err(io::Error::other(format!("IMDS answered {status}")));
    }
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())
            .flatten()
    });
    match length {
        Some(n) if body.len() >= n => Ok(Some(body[..n].to_owned())),
        Some(_) => Ok(None),
        // Without a length, the body ends with the connection (`Connection: close`).
        None => Ok(eof.then(|| body.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// A fake IMDSv2 on a local port: a token for a PUT with a TTL header, the three values for
    /// GETs carrying the token, 401 otherwise. `delay` holds every answer back.
    fn fake_imds(delay: Duration) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { return };
                thread::spawn(move || {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 512];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match c.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    let req = String::from_utf8_lossy(&req).to_string();
                    thread::sleep(delay);
                    let line = req.lines().next().unwrap_or("");
                    let body = if line.starts_with("PUT /latest/api/token ")
                        && req.contains("X-aws-ec2-metadata-token-ttl-seconds:")
                    {
                        Some("TOKEN42")
                    } else if !req.contains("X-aws-ec2-metadata-token: TOKEN42") {
                        None
                    } else if line.starts_with("GET /latest/meta-data/instance-type ") {
                        Some("m5.large")
                    } else if line.starts_with("GET /latest/meta-data/placement/region ") {
                        Some("us-east-1")
                    } else if line
                        .starts_with("GET /latest/meta-data/placement/availability-zone-id ")
                    {
                        Some("use1-az4")
                    } else {
                        None
                    };
                    let answer = match body {
                        Some(b) => {
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{b}", b.len())
                        }
                        None => "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n".into(),
                    };
                    let _ = c.write_all(answer.as_bytes());
                });
            }
        });
        addr
    }

    #[test]
    fn imdsv2_gives_type_region_and_zone_id() {
        let at = fake_imds(Duration::ZERO);
        // A generous budget: this test checks the exchange, the next one the budget.
        let p = placement(at, Duration::from_secs(5)).unwrap();
        assert_eq!(
            p,
            Placement {
                instance_type: "m5.large".into(),
                region: "us-east-1".into(),
                availability_zone_id: "use1-az4".into(),
            }
        );
    }

    #[test]
    fn a_slow_imds_is_given_up_on_when_the_budget_is_spent() {
        let at = fake_imds(Duration::from_secs(3));
        let t = Instant::now();
        let e = placement(at, BUDGET).unwrap_err();
        // Bounded by the budget (with room for a loaded machine's scheduling), never by the
        // fake's 3 s.
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{e}"
        );
    }

    #[test]
    fn nothing_listening_is_no_placement() {
        // A port nothing listens on: refused at once.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        drop(l);
        assert!(placement(at, BUDGET).is_err());
    }

    #[test]
    fn endpoints_are_ip_addresses_over_http_only() {
        assert_eq!(
            parse_endpoint("http://169.254.169.254"),
            Some(DEFAULT_ENDPOINT)
        );
        assert_eq!(
            parse_endpoint("http://127.0.0.1:8080/"),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            parse_endpoint("http://[fd00:ec2::254]"),
            Some("[fd00:ec2::254]:80".parse().unwrap())
        );
        assert_eq!(parse_endpoint("https://169.254.169.254"), None);
        assert_eq!(parse_endpoint("http://imds.internal"), None);
    }

    #[test]
    fn a_partial_answer_waits_and_an_error_status_is_an_error() {
        let partial = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nm5.l";
        assert_eq!(complete_body(partial, false).unwrap(), None);
        let whole = b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nm5.large";
        assert_eq!(
            complete_body(whole, false).unwrap(),
            Some("m5.large".into())
        );
        let unsized_ = b"HTTP/1.1 200 OK\r\n\r\nus-east-1";
        assert_eq!(complete_body(unsized_, false).unwrap(), None);
        assert_eq!(
            complete_body(unsized_, true).unwrap(),
            Some("us-east-1".into())
        );
        assert!(complete_body(b"HTTP/1.1 403 Forbidden\r\n\r\n", true).is_err());
    }
}
