//! The per-packet reply of a round-trip run (`-r`, `--echo`, `--response-size`), spelled
//! once for the settings, the workloads and every STREAM, and the accounting a
//! byte-stream STREAM's answering end keeps to know when a packet is whole and what it
//! owes for it. No I/O here: the STREAMs write what [`ReplyCursor`] hands them.

/// What answers each packet of a round-trip run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The 1-byte ACK (`-r`, the original design's MPRTT).
    Ack,
    /// This many bytes (`-r --response-size N`).
    Sized(u32),
    /// The packet itself, as many bytes (`--echo`, sockperf's and qperf's ping-pong).
    Echo,
}

impl Reply {
    /// Bytes of the reply to a packet of `packet` bytes.
    pub fn len(self, packet: usize) -> usize {
        match self {
            Reply::Ack => 1,
            Reply::Sized(n) => n as usize,
            Reply::Echo => packet,
        }
    }

    /// Bytes of the largest reply to packets of up to `pktsize` bytes.
    pub fn max_len(self, pktsize: usize) -> usize {
        self.len(pktsize)
    }
}

/// Where a byte-stream STREAM's answering end stands in the packet now arriving on one
/// connection: bytes come in pieces of any size, and each whole packet (and, at the end,
/// a partial last one) is owed its [`Reply`].
pub struct ReplyCursor {
    reply: Reply,
    pktsize: usize,
    /// Bytes of the current packet received so far.
    at: usize,
    /// An echo's copy of the current packet when it arrives in pieces; otherwise the
    /// reply written for every packet. Allocated once.
    held: Vec<u8>,
}

impl ReplyCursor {
    /// Accounting for packets of `pktsize` bytes answered by `reply`.
    pub fn new(reply: Reply, pktsize: usize) -> ReplyCursor {
        let pktsize = pktsize.max(1);
        let held = match reply {
            Reply::Echo => vec![0u8; pktsize],
            // The ACK's byte, or a sized reply's: their content is not looked at.
            Reply::Ack | Reply::Sized(_) => vec![1u8; reply.len(pktsize).max(1)],
        };
        ReplyCursor {
            reply,
            pktsize,
            at: 0,
            held,
        }
    }

    /// Takes in `data`, just received, and hands `answer` the reply to each packet it
    /// completes, in order: a whole echoed packet straight from `data` where it lies
    /// whole, else from the copy kept of its pieces.
    pub fn take<E>(
        &mut self,
        data: &[u8],
        mut answer: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let pkt = self.pktsize;
        if self.reply != Reply::Echo {
            self.at += data.len();
            while self.at >= pkt {
                self.at -= pkt;
                answer(&self.held)?;
            }
            return Ok(());
        }
        let mut rest = data;
        while !rest.is_empty() {
            if self.at == 0 && rest.len() >= pkt {
                answer(&rest[..pkt])?;
                rest = &rest[pkt..];
                continue;
            }
            let take = (pkt - self.at).min(rest.len());
            self.held[self.at..self.at + take].copy_from_slice(&rest[..take]);
            self.at += take;
            rest = &rest[take..];
            if self.at == pkt {
                self.at = 0;
                answer(&self.held)?;
            }
        }
        Ok(())
    }

    /// The sender is done: hands `answer` the reply owed to a partial last packet, if
    /// one is pending (an echo returns the bytes that came; other replies are whole).
    pub fn finish<E>(&mut self, answer: impl FnOnce(&[u8]) -> Result<(), E>) -> Result<(), E> {
        let part = std::mem::take(&mut self.at);
        match (part, self.reply) {
            (0, _) => Ok(()),
            (n, Reply::Echo) => answer(&self.held[..n]),
            (_, Reply::Ack | Reply::Sized(_)) => answer(&self.held),
        }
    }

    /// Whether no packet is partly received.
    pub fn between_packets(&self) -> bool {
        self.at == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` to a cursor and finishes it; returns the replies it handed out.
    fn answers(reply: Reply, pktsize: usize, pieces: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut cursor = ReplyCursor::new(reply, pktsize);
        let mut out = Vec::new();
        for piece in pieces {
            cursor
                .take(piece, |r| {
                    out.push(r.to_vec());
                    Ok::<(), ()>(())
                })
                .expect("no error");
        }
        cursor
            .finish(|r| {
                out.push(r.to_vec());
                Ok::<(), ()>(())
            })
            .expect("no error");
        out
    }

    #[test]
    fn each_whole_packet_and_the_partial_last_one_get_one_reply() {
        let acks = answers(Reply::Ack, 4, &[b"ab", b"cdefg", b"hij"]);
        assert_eq!(acks, vec![vec![1u8]; 3], "2 whole packets and 2 bytes more");
        let sized = answers(Reply::Sized(3), 2, &[b"abcd"]);
        assert_eq!(sized, vec![vec![1u8; 3]; 2], "nothing owed at the end");
    }

    #[test]
    fn an_echo_returns_each_packet_whole_or_gathered_and_the_rest_as_it_came() {
        let echoes = answers(Reply::Echo, 3, &[b"abcd", b"ef", b"ghij", b"k"]);
        assert_eq!(
            echoes,
            [
                b"abc".to_vec(),
                b"def".to_vec(),
                b"ghi".to_vec(),
                b"jk".to_vec()
            ]
        );
    }

    #[test]
    fn a_failed_answer_stops_the_packets_after_it() {
        let mut cursor = ReplyCursor::new(Reply::Ack, 1);
        let mut calls = 0;
        let r = cursor.take(b"abc", |_| {
            calls += 1;
            Err("peer gone")
        });
        assert_eq!((r, calls), (Err("peer gone"), 1));
    }

    #[test]
    fn a_reply_is_as_long_as_its_kind_says() {
        assert_eq!(Reply::Ack.len(100), 1);
        assert_eq!(Reply::Sized(7).len(100), 7);
        assert_eq!(Reply::Echo.len(100), 100);
        assert!(ReplyCursor::new(Reply::Echo, 8).between_packets());
    }
}
