//! The `xbench` binary `up` puts on the hosts: found beside `xbench-deploy` (or given with
//! `--xbench`), read once for its SHA-256, its CPU architecture and the C library it needs, so
//! a binary that cannot run on the instances is refused at `plan` instead of failing at boot.
//!
//! Reads ELF headers only (no execution). Not for uploading (see [`crate::aws::s3`]) or for
//! the boot script's own checks (see [`crate::userdata`]).

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::plan::{HostRole, Plan};
use crate::scenario::{AmiChoice, Scenario};

/// The newest glibc symbol version Amazon Linux 2023 provides (its glibc is 2.34).
pub const AL2023_GLIBC: (u32, u32) = (2, 34);

/// A CPU architecture of EC2 instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// Intel and AMD.
    X86_64,
    /// Graviton.
    Arm64,
}

impl Arch {
    /// EC2's name (`DescribeInstanceTypes`' `SupportedArchitectures`).
    pub fn ec2_name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The Rust target a static binary for it is built for.
    pub fn musl_target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-musl",
            Arch::Arm64 => "aarch64-unknown-linux-musl",
        }
    }

    /// The architecture EC2 names `name`, if it is one of ours.
    pub fn from_ec2(name: &str) -> Option<Arch> {
        match name {
            "x86_64" => Some(Arch::X86_64),
            "arm64" => Some(Arch::Arm64),
            _ => None,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ec2_name())
    }
}

/// The architecture of an instance type, from its name (Graviton families carry a `g` after
/// the generation: m7g, c6gn, t4g, r8gd, x2gd; and a1). `up` and `plan --check` confirm it
/// with DescribeInstanceTypes.
pub fn arch_of_instance_type(instance_type: &str) -> Arch {
    let family = instance_type.split('.').next().unwrap_or_default();
    let family = family.split('-').next().unwrap_or_default();
    let letters = family.bytes().take_while(u8::is_ascii_alphabetic).count();
    let digits = family[letters..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    let prefix = &family[..letters];
    let generation = &family[letters..letters + digits];
    let suffix = &family[letters + digits..];
    if (prefix == "a" && generation == "1") || suffix.contains('g') {
        Arch::Arm64
    } else {
        Arch::X86_64
    }
}

/// What was read from the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XbenchBinary {
    /// Where it is.
    pub path: PathBuf,
    /// Size, bytes.
    pub size: u64,
    /// SHA-256, lowercase hex; the boot script checks it.
    pub sha256: String,
    /// What it runs on.
    pub arch: Arch,
    /// For a dynamically linked binary, the newest `GLIBC_2.x` symbol version it needs;
    /// `None` for a static one.
    pub glibc: Option<(u32, u32)>,
}

/// Why a binary cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BinaryError {
    /// No file.
    #[error(
        "no xbench binary at {path}: build it (cargo build --release -p xbench-cli), pass \
         --xbench PATH, or set [xbench] url and sha256 in the scenario"
    )]
    Missing {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// Unreadable.
    #[error("cannot read the xbench binary {path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS's reason.
        message: String,
    },
    /// Not a 64-bit little-endian ELF executable for x86_64 or arm64.
    #[error("{path} is not a Linux x86_64 or arm64 executable ({why})")]
    NotElf {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        why: String,
    },
    /// Built for the other architecture.
    #[error(
        "{path} is an {binary} binary, but {instance_type} ({hosts}) is {instance}: build xbench \
         for {instance} (cargo build --release --target {target} -p xbench-cli) and pass it \
         with --xbench, or choose an {binary} instance type"
    )]
    WrongArch {
        /// The file.
        path: PathBuf,
        /// Its architecture.
        binary: Arch,
        /// The instance type.
        instance_type: String,
        /// Which hosts use it.
        hosts: String,
        /// The type's architecture.
        instance: Arch,
        /// The Rust target to build for.
        target: &'static str,
    },
    /// Needs a newer C library than the image has.
    #[error(
        "{path} is linked against glibc and needs GLIBC_{}.{}, but Amazon Linux 2023 has glibc \
         {}.{}: build a static binary (rustup target add {target}; cargo build --release \
         --target {target} -p xbench-cli) and pass it with --xbench",
        needs.0, needs.1, AL2023_GLIBC.0, AL2023_GLIBC.1
    )]
    GlibcTooNew {
        /// The file.
        path: PathBuf,
        /// The newest version it needs.
        needs: (u32, u32),
        /// The Rust target to build for.
        target: &'static str,
    },
}

/// Where `xbench` is by default: the first that exists of [`candidates`] (beside the running
/// `xbench-deploy`, the other build profile's `target/` directory, a static musl build, then
/// `PATH`), else beside `xbench-deploy` (which then is reported missing, with the places
/// looked in).
pub fn default_path() -> PathBuf {
    let list = candidates();
    list.iter()
        .find(|p| p.is_file())
        .or(list.first())
        .cloned()
        .unwrap_or_else(|| PathBuf::from("xbench"))
}

/// Where a user's `xbench` may be, in the order [`default_path`] tries: beside
/// `xbench-deploy` (`cargo install` puts both in one directory; one build puts both in one
/// `target/<profile>/`); in `target/` of the same tree a release build
/// (`target/release/xbench`), a static one (`target/x86_64-unknown-linux-musl/release/xbench`,
/// what the hosts' glibc cannot refuse) and a debug one — a debug `xbench-deploy` beside a
/// release `xbench` is usual; and `xbench` on `PATH`.
pub fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let exe = std::env::current_exe().ok();
    let dir = exe.as_deref().and_then(Path::parent);
    if let Some(d) = dir {
        out.push(d.join("xbench"));
        // target/<profile>/xbench-deploy, or target/<profile>/deps/<test binary>.
        let target = d
            .ancestors()
            .find(|a| a.file_name().is_some_and(|n| n == "target"));
        if let Some(t) = target {
            for sub in [
                "release",
                "x86_64-unknown-linux-musl/release",
                "aarch64-unknown-linux-musl/release",
                "debug",
            ] {
                let p = t.join(sub).join("xbench");
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&paths) {
            let p = d.join("xbench");
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

impl XbenchBinary {
    /// Reads `path`.
    pub fn inspect(path: &Path) -> Result<XbenchBinary, BinaryError> {
        let read_err = |e: std::io::Error| BinaryError::Read {
            path: path.to_owned(),
            message: e.to_string(),
        };
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(BinaryError::Missing {
                    path: path.to_owned(),
                });
            }
            Err(e) => return Err(read_err(e)),
        };
        let elf = Elf::parse(&bytes).map_err(|why| BinaryError::NotElf {
            path: path.to_owned(),
            why,
        })?;
        let glibc = elf.dynamic.then(|| newest_glibc(&bytes)).flatten();
        Ok(XbenchBinary {
            path: path.to_owned(),
            size: bytes.len() as u64,
            sha256: sha256_hex(&bytes),
            arch: elf.arch,
            glibc,
        })
    }

    /// Refuses the binary for hosts of `arch` (an instance type named for the message), and
    /// a glibc newer than Amazon Linux 2023's when `al2023`.
    pub fn check_for(
        &self,
        arch: Arch,
        instance_type: &str,
        hosts: &str,
        al2023: bool,
    ) -> Result<(), BinaryError> {
        if self.arch != arch {
            return Err(BinaryError::WrongArch {
                path: self.path.clone(),
                binary: self.arch,
                instance_type: instance_type.to_owned(),
                hosts: hosts.to_owned(),
                instance: arch,
                target: arch.musl_target(),
            });
        }
        if let Some(needs) = self.glibc
            && al2023
            && needs > AL2023_GLIBC
        {
            return Err(BinaryError::GlibcTooNew {
                path: self.path.clone(),
                needs,
                target: self.arch.musl_target(),
            });
        }
        Ok(())
    }
}

/// The binary against every xbench host of `plan` (servers and clients; gateways do not run
/// xbench), by the architecture their instance types' names tell, and with `glibc` also
/// against Amazon Linux 2023's C library. `up` checks again with what AWS reports.
pub fn check_plan(
    bin: &XbenchBinary,
    scenario: &Scenario,
    plan: &Plan,
    glibc: bool,
) -> Result<(), BinaryError> {
    let al2023 = glibc && scenario.ami == AmiChoice::AmazonLinux2023;
    for h in plan.hosts.iter().filter(|h| h.role != HostRole::Gateway) {
        bin.check_for(
            arch_of_instance_type(&h.instance_type),
            &h.instance_type,
            &h.key,
            al2023,
        )?;
    }
    Ok(())
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// SHA-256 of a file, lowercase hex, read in pieces.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

struct Elf {
    arch: Arch,
    dynamic: bool,
}

const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
const PT_INTERP: u32 = 3;

impl Elf {
    fn parse(b: &[u8]) -> Result<Elf, String> {
        if b.len() < 64 || &b[..4] != b"\x7fELF" {
            return Err("no ELF header".into());
        }
        if b[4] != 2 || b[5] != 1 {
            return Err("not a 64-bit little-endian ELF file".into());
        }
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| {
            b.get(o..o + 4)
                .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        };
        let arch = match u16_at(18) {
            EM_X86_64 => Arch::X86_64,
            EM_AARCH64 => Arch::Arm64,
            other => return Err(format!("ELF machine {other}")),
        };
        let mut off = [0u8; 8];
        off.copy_from_slice(&b[32..40]);
        let phoff = usize::try_from(u64::from_le_bytes(off)).unwrap_or(usize::MAX);
        let phentsize = usize::from(u16_at(54));
        let phnum = usize::from(u16_at(56));
        let dynamic = (0..phnum).any(|i| {
            phoff
                .checked_add(i.saturating_mul(phentsize))
                .and_then(u32_at)
                == Some(PT_INTERP)
        });
        Ok(Elf { arch, dynamic })
    }
}

/// The newest `GLIBC_2.x` version named in the binary's version strings.
fn newest_glibc(b: &[u8]) -> Option<(u32, u32)> {
    const TAG: &[u8] = b"GLIBC_2.";
    let mut best: Option<(u32, u32)> = None;
    let mut i = 0;
    while let Some(pos) = b[i..].windows(TAG.len()).position(|w| w == TAG) {
        let start = i + pos + TAG.len();
        let digits = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        if let Some(minor) = std::str::from_utf8(&b[start..start + digits])
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
        {
            best = best.max(Some((2, minor)));
        }
        i = start;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF header for `machine`, with a PT_INTERP program header when `dynamic`.
    pub(crate) fn fake_elf(machine: u16, dynamic: bool, extra: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&1u16.to_le_bytes());
        let p_type: u32 = if dynamic { PT_INTERP } else { 1 };
        b[64..68].copy_from_slice(&p_type.to_le_bytes());
        b.extend_from_slice(extra);
        b
    }

    #[test]
    fn instance_type_architectures() {
        for t in [
            "m7g.large",
            "c6gn.xlarge",
            "t4g.micro",
            "r8gd.2xlarge",
            "a1.large",
            "x2gd.xlarge",
        ] {
            assert_eq!(arch_of_instance_type(t), Arch::Arm64, "{t}");
        }
        for t in [
            "m5.large",
            "c5n.large",
            "m7i-flex.large",
            "g4dn.xlarge",
            "g5.xlarge",
            "t3.micro",
            "m5dn.large",
        ] {
            assert_eq!(arch_of_instance_type(t), Arch::X86_64, "{t}");
        }
    }

    #[test]
    fn elf_headers_give_arch_and_glibc() {
        let dir = std::env::temp_dir().join(format!("xbd-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x");
        std::fs::write(&p, fake_elf(EM_AARCH64, false, b"")).unwrap();
        let b = XbenchBinary::inspect(&p).unwrap();
        assert_eq!((b.arch, b.glibc), (Arch::Arm64, None));
        let e = b
            .check_for(Arch::X86_64, "m5.large", "server-a", true)
            .unwrap_err();
        assert!(e.to_string().contains("x86_64-unknown-linux-musl"), "{e}");

        std::fs::write(
            &p,
            fake_elf(EM_X86_64, true, b"\0GLIBC_2.17\0GLIBC_2.39\0GLIBC_2.3.4\0"),
        )
        .unwrap();
        let b = XbenchBinary::inspect(&p).unwrap();
        assert_eq!(b.glibc, Some((2, 39)));
        assert!(matches!(
            b.check_for(Arch::X86_64, "m5.large", "h", true),
            Err(BinaryError::GlibcTooNew { .. })
        ));
        assert!(b.check_for(Arch::X86_64, "m5.large", "h", false).is_ok());
        assert_eq!(b.sha256, sha256_file(&p).unwrap());

        std::fs::write(&p, b"#!/bin/sh\n").unwrap();
        assert!(matches!(
            XbenchBinary::inspect(&p),
            Err(BinaryError::NotElf { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(
            XbenchBinary::inspect(&p),
            Err(BinaryError::Missing { .. })
        ));
    }
}
