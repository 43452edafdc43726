//! The files xbench keeps and reads back, and the one rule for touching a path a user named:
//! write only what is ours, read only regular files of a bounded size.
//!
//! For the programs built on the library that keep results and state on disk (`--json-file`,
//! `--hist`, a sweep's saved runs, charts, the lab's and a deployment's state files) and read
//! them back (`report`, `compare`, `--resume`). The library itself writes no files while it
//! measures.
//!
//! **Writing** ([`write_atomically`], [`write_private`] for secrets), by what is at the path:
//!
//! - nothing, or a regular file: replaced atomically (a temporary file in the same directory,
//!   flushed, renamed over the name), so a crash or a second writer never leaves half a file;
//! - a FIFO, a character or block device: written in place, never replaced, never truncated
//!   (`/dev/null` stays a device; a FIFO's reader gets the document);
//! - `-`: standard output;
//! - a symbolic link: followed, and the rules above apply to its target; the link itself is
//!   never replaced. The kernel follows it (so `fs.protected_symlinks` still guards world-
//!   writable sticky directories such as `/tmp`), and a link to nothing is refused rather
//!   than its target created. Following, not refusing, because a link is how people point
//!   output somewhere else (`results.json` → a shared volume, `/dev/stdout`), as a shell's
//!   `>` follows it;
//! - a directory or a socket: refused.
//!
//! [`check_writable`] (and [`check_dir_writable`] for a directory of outputs) applies the same
//! rule without writing, so that a program can refuse an output path before a test runs rather
//! than after it. [`create_regular`] is for the one kind of file that cannot be replaced whole,
//! a log a helper process writes as it runs: a regular file or nothing.
//!
//! **Reading** ([`read_regular`], [`open_regular`]): regular files only (a symbolic link is
//! followed to one, as when writing), never a FIFO (which would block) nor a device (a link
//! to `/dev/zero` never ends), and at most a size the caller names.

mod read;
mod write;

pub use read::{ReadError, open_regular, read_regular};
pub use write::{
    FIFO_READER_WAIT, check_dir_writable, check_writable, create_regular, write_atomically,
    write_json_atomically, write_private,
};
