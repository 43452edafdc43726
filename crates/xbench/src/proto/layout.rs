//! Which way each stream of a throughput test flows, by stream id: the numbering both ends
//! derive from the test's spec, so a data connection's [`DataHello`](super::DataHello) id means
//! the same stream at both ends without either having to say more.
//!
//! Not the streams themselves (the engine runs them) nor how their figures are merged
//! ([`crate::summary`], which takes [`StreamLayout::directions`]).

use crate::config::{Direction, StreamDirection, TestSpec, ThroughputSpec, Workload};
use crate::summary::Directions;

/// The stream ids of a throughput test and the way each one's data flows: `-P` client-to-server
/// streams first, then (`--bidir`) as many server-to-client ones. `-R` numbers its
/// server-to-client streams from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLayout {
    per_direction: u16,
    direction: Direction,
}

impl StreamLayout {
    /// The layout of a test with these settings.
    pub fn new(spec: &ThroughputSpec) -> Self {
        StreamLayout {
            per_direction: spec.streams.get(),
            direction: spec.direction,
        }
    }

    /// How many streams, hence data connections, the test opens.
    pub fn streams(self) -> usize {
        usize::from(self.per_direction) * self.direction.stream_directions().len()
    }

    /// Which way stream `id` flows; `None` for an id the test does not have.
    pub fn direction(self, id: u16) -> Option<StreamDirection> {
        let per = usize::from(self.per_direction);
        self.direction
            .stream_directions()
            .get(usize::from(id) / per.max(1))
            .copied()
    }

    /// Whether any stream flows this way.
    pub fn contains(self, direction: StreamDirection) -> bool {
        self.direction.stream_directions().contains(&direction)
    }

    /// Every stream in id order, with its direction.
    pub fn iter(self) -> impl Iterator<Item = (u16, StreamDirection)> {
        let per = usize::from(self.per_direction);
        self.direction
            .stream_directions()
            .iter()
            .flat_map(move |d| std::iter::repeat_n(*d, per))
            .enumerate()
            // Ids are u16 on the wire; a test with more streams than that fails validation
            // long before it gets here, and is cut at the last id rather than wrapping.
            .map_while(|(i, d)| u16::try_from(i).ok().map(|id| (id, d)))
    }

    /// The layout as the map [`crate::summary`] merges by.
    pub fn directions(self) -> Directions {
        self.iter().collect()
    }
}

/// Here rather than in `config` because the count is the layout's: `config` describes a test
/// and knows no wire layout.
impl TestSpec {
    /// Total number of data connections the test opens.
    pub fn connection_count(&self) -> usize {
        match &self.workload {
            // UDP streams open no connection; their sockets prove themselves by datagram.
            Workload::Throughput(t) if t.udp.is_some() => 0,
            Workload::Throughput(t) => StreamLayout::new(t).streams(),
            // --crr connections arrive during the test, one per transaction; UDP flows open
            // none.
            Workload::RequestResponse(r) if r.connect_per_transaction || r.udp.is_some() => 0,
            Workload::RequestResponse(r) => r.flows.as_usize(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;

    use super::*;

    fn layout(streams: u16, direction: Direction) -> StreamLayout {
        StreamLayout::new(&ThroughputSpec {
            streams: NonZeroU16::new(streams).unwrap(),
            direction,
            ..ThroughputSpec::default()
        })
    }

    #[test]
    fn bidir_numbers_client_to_server_streams_first() {
        use StreamDirection::{ClientToServer as Up, ServerToClient as Down};
        let l = layout(2, Direction::Bidir);
        assert_eq!(l.streams(), 4);
        let all: Vec<_> = l.iter().collect();
        assert_eq!(all, vec![(0, Up), (1, Up), (2, Down), (3, Down)]);
        assert_eq!(l.direction(1), Some(Up));
        assert_eq!(l.direction(2), Some(Down));
        assert_eq!(l.direction(4), None);
        assert!(l.contains(Up) && l.contains(Down));
        assert_eq!(l.directions().len(), 4);
    }

    #[test]
    fn one_way_tests_number_from_zero() {
        let l = layout(3, Direction::ServerToClient);
        assert_eq!(l.streams(), 3);
        assert!(l.iter().all(|(_, d)| d == StreamDirection::ServerToClient));
        assert_eq!(l.direction(3), None);
        assert!(!l.contains(StreamDirection::ClientToServer));
    }
}
