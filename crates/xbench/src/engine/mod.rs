//! The data path: threads that move bytes, and the sampler that turns their counters and the
//! kernel's TCP state into intervals and totals. UDP streams have their own threads and
//! accounting in [`udp`].
//!
//! Each data connection gets a dedicated OS thread with a blocking socket. A bulk stream spends
//! its life in `send()`/`recv()`; a thread per stream keeps that loop free of wake-ups and task
//! switches (see `benches/` for the comparison), and a test has at most a few hundred streams.
//! Threads publish a cumulative byte count with a relaxed store; everything else (TCP_INFO,
//! clocks, interval arithmetic) happens in the sampler, off the hot loop. Both client and server
//! use this module; neither the protocol nor any printing lives here.

pub(crate) mod cpu;
pub(crate) mod group;
pub(crate) mod rr;
pub(crate) mod sampler;
pub(crate) mod schedule;
pub(crate) mod send_budget;
pub(crate) mod sockopt;
pub(crate) mod stream;
pub(crate) mod udp;
