//! Runs the iproute2 and other commands that build a lab, with the command line and its
//! standard error in every failure.
//!
//! The lab drives `ip` and `tc` rather than speaking netlink itself: they are how operators
//! build and inspect the same namespaces (`ip netns exec xbl-c …`), their `tbf`/`netem`
//! parameter encoding is the reference one, and a failing command line in an error message is
//! something a user can paste and debug. Setting up a lab takes some dozens of commands, well
//! under a second. Not for: long-running processes (see `process`).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::error::LabError;

/// Directories searched after `$PATH`: a non-root `$PATH` often lacks the sbin directories
/// where `ip`, `tc` and `openvpn` live on Debian.
const EXTRA_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// Finds an executable by name in `$PATH` and the sbin directories.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|d| d.join(program))
        .find(|p| is_executable(p))
}

/// True for a regular file with an execute bit.
pub fn is_executable(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Finds `program` or says which Debian package provides it.
pub fn require(
    program: &str,
    package: &'static str,
    purpose: &'static str,
) -> Result<PathBuf, LabError> {
    which(program).ok_or_else(|| LabError::MissingProgram {
        program: program.to_owned(),
        package,
        purpose,
    })
}

/// Runs `program args…` to completion; returns its standard output.
pub fn run(program: &str, args: &[&str]) -> Result<String, LabError> {
    let exe = match program {
        "ip" | "tc" => require(program, "iproute2", "the lab")?,
        p => which(p).unwrap_or_else(|| PathBuf::from(p)),
    };
    let line = format!("{program} {}", args.join(" "));
    let out = Command::new(&exe)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Command {
            command: line.clone(),
            detail: e.to_string(),
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LabError::Command {
            command: line,
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

/// `ip args…`.
pub fn ip(args: &[&str]) -> Result<String, LabError> {
    run("ip", args)
}

/// `tc args…`.
pub fn tc(args: &[&str]) -> Result<String, LabError> {
    run("tc", args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_carry_the_command_and_its_stderr() {
        let e = run("sh", &["-c", "echo nope >&2; exit 3"]).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("sh -c") && s.contains("nope") && s.contains('3'),
            "{s}"
        );
        assert_eq!(run("sh", &["-c", "echo hi"]).unwrap(), "hi\n");
    }

    #[test]
    fn missing_programs_name_their_package() {
        let e = require("xbench-no-such-program", "xbench-pkg", "a test").unwrap_err();
        assert!(e.to_string().contains("apt-get install xbench-pkg"), "{e}");
    }
}
