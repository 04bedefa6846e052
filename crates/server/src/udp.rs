//! UDP: one `SO_REUSEPORT` socket per worker (the stand-in for a NIC RX
//! queue), registered one-shot in an epoll like a connection. Each datagram
//! is one frame-headed request batch answered with split reply datagrams;
//! requests run through the same parse → execute → error-reply code as TCP.
//!
//! ```text
//!   recv_from ─► FrameHeader ─► parse ─► execute / exec::error_reply ─► split_reply ─► send_to
//! ```

use std::io;

use bytes::{Buf, BytesMut};
use mio::net::UdpSocket;
use tailtrim_proto::reply::{self, ReplyBuf};
use tailtrim_proto::udp::{split_reply, FrameHeader, HEADER_LEN};
use tailtrim_proto::{parse_request, Limits, Parsed};

use crate::exec::{count_read, count_written, error_reply, execute, ExecContext, Flow};

/// Serves every datagram waiting on `socket`.
pub fn serve(socket: &UdpSocket, ctx: &ExecContext<'_>, limits: &Limits) {
    let mut datagram = vec![0u8; 65536];
    loop {
        let (len, peer) = match socket.recv_from(&mut datagram) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        count_read(ctx.counters, len);
        let Some(header) = FrameHeader::parse(&datagram[..len]) else {
            continue;
        };
        let mut output = ReplyBuf::new();
        if header.total != 1 || header.sequence != 0 {
            reply::line(
                &mut output,
                b"SERVER_ERROR multi-packet request not supported",
            );
        } else {
            serve_payload(&datagram[HEADER_LEN..len], ctx, limits, &mut output);
        }
        let reply_bytes = output.take_contiguous();
        let Some(grams) = split_reply(header.request_id, &reply_bytes) else {
            continue;
        };
        for gram in grams {
            if let Ok(n) = socket.send_to(&gram, peer) {
                count_written(ctx.counters, n);
            }
        }
    }
}

/// Executes the requests of one datagram's payload into `output`.
pub fn serve_payload(
    payload: &[u8],
    ctx: &ExecContext<'_>,
    limits: &Limits,
    output: &mut ReplyBuf,
) {
    let mut input = BytesMut::from(payload);
    while !input.is_empty() {
        match parse_request(&input, limits) {
            Parsed::Incomplete => break,
            Parsed::Complete { value, consumed } => {
                let frame = input.split_to(consumed).freeze();
                if execute(value, &frame, ctx, output) == Flow::Close {
                    break;
                }
            }
            Parsed::Invalid { error, consumed } => {
                input.advance(consumed.min(input.len()));
                error_reply(&error, ctx, output);
                if error.swallow() > 0 || error.closes_connection() {
                    break;
                }
            }
        }
    }
}
