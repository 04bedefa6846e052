//! memcached's UDP framing: every datagram starts with an 8-byte header
//! (request id, sequence number, total datagrams, reserved; big endian).
//! A request must fit in one datagram; replies are split into datagrams of
//! at most [`MAX_DATAGRAM`] bytes, header included.

/// Size of the frame header.
pub const HEADER_LEN: usize = 8;

/// Largest datagram memcached sends (header included).
pub const MAX_DATAGRAM: usize = 1400;

/// The frame header of one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Chosen by the client; echoed in every reply datagram.
    pub request_id: u16,
    /// Index of this datagram within the message.
    pub sequence: u16,
    /// Number of datagrams in the message.
    pub total: u16,
    /// Must be zero.
    pub reserved: u16,
}

impl FrameHeader {
    /// Decodes the header at the start of a datagram.
    pub fn parse(datagram: &[u8]) -> Option<FrameHeader> {
        let h = datagram.get(..HEADER_LEN)?;
        let field = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        Some(FrameHeader {
            request_id: field(0),
            sequence: field(2),
            total: field(4),
            reserved: field(6),
        })
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..2].copy_from_slice(&self.request_id.to_be_bytes());
        out[2..4].copy_from_slice(&self.sequence.to_be_bytes());
        out[4..6].copy_from_slice(&self.total.to_be_bytes());
        out[6..8].copy_from_slice(&self.reserved.to_be_bytes());
        out
    }
}

/// Splits a reply into framed datagrams for `request_id`. An empty reply
/// yields no datagram. Returns `None` if more than 65535 datagrams would be needed.
pub fn split_reply(request_id: u16, reply: &[u8]) -> Option<Vec<Vec<u8>>> {
    const PAYLOAD: usize = MAX_DATAGRAM - HEADER_LEN;
    let pieces: Vec<&[u8]> = reply.chunks(PAYLOAD).collect();
    let total = u16::try_from(pieces.len()).ok()?;
    Some(
        pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| {
                let header = FrameHeader {
                    request_id,
                    sequence: i as u16,
                    total,
                    reserved: 0,
                };
                let mut datagram = Vec::with_capacity(HEADER_LEN + piece.len());
                datagram.extend_from_slice(&header.encode());
                datagram.extend_from_slice(piece);
                datagram
            })
            .collect(),
    )
}

/// Reassembles the payload of a reply from its datagrams (any order), as a
/// client would. Returns `None` while datagrams are missing or inconsistent.
pub fn reassemble(datagrams: &[Vec<u8>]) -> Option<Vec<u8>> {
    let first = FrameHeader::parse(datagrams.first()?)?;
    let mut parts: Vec<Option<&[u8]>> = vec![None; usize::from(first.total)];
    for d in datagrams {
        let h = FrameHeader::parse(d)?;
        if h.request_id != first.request_id || h.total != first.total {
            return None;
        }
        *parts.get_mut(usize::from(h.sequence))? = Some(&d[HEADER_LEN..]);
    }
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(p?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = FrameHeader {
            request_id: 0xBEEF,
            sequence: 2,
            total: 3,
            reserved: 0,
        };
        assert_eq!(FrameHeader::parse(&h.encode()), Some(h));
        assert_eq!(FrameHeader::parse(&[0; 7]), None);
    }

    #[test]
    fn split_respects_limit_and_reassembles() {
        let reply: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let mut grams = split_reply(7, &reply).unwrap();
        assert_eq!(grams.len(), 5000usize.div_ceil(MAX_DATAGRAM - HEADER_LEN));
        assert!(grams.iter().all(|g| g.len() <= MAX_DATAGRAM));
        grams.reverse();
        assert_eq!(reassemble(&grams).unwrap(), reply);
        grams.pop();
        assert_eq!(reassemble(&grams), None);
    }
}
