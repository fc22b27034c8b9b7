// SPDX-License-Identifier: MPL-2.0

//! The bridge's messages. Each is one UCX tag message: control messages
//! (a kind byte and fields, little-endian) on [`CONTROL`], replies on
//! [`REPLY`], and a frame's bytes on [`payload_tag`] of its number, sent
//! straight from the sender's slot into the receiver's. A decoder takes
//! no length on trust: anything that does not add up is an error, and the
//! receiver drops the sender that sent it.

use std::fmt;

/// The protocol's version, in the hello; a receiver refuses another.
pub const VERSION: u32 = 1;
/// Every bit of a tag is matched.
pub const EXACT: u64 = u64::MAX;
const KIND_SHIFT: u32 = 56;
const SESSION_SHIFT: u32 = 40;
const NUMBER_MASK: u64 = (1 << SESSION_SHIFT) - 1;
/// The largest control message: a frame's fields with its data (metas,
/// at most the channel's frame data bound), or caps.
pub const MAX_CONTROL: usize = cudaipc_channel::layout::MAX_FRAME_DATA_BOUND as usize + (64 << 10);
const MAX_PLANES: usize = 4;
/// The length of a challenge and of its proof.
pub const NONCE: usize = 32;

/// A tag: the message's kind, the receiver's session number (from its
/// challenge, so that a former sender's late messages never match), and
/// a frame's number.
fn tag(kind: u64, session: u16, number: u64) -> u64 {
    (kind << KIND_SHIFT) | ((session as u64) << SESSION_SHIFT) | (number & NUMBER_MASK)
}

/// Sender to receiver: one [`Control`].
pub fn control_tag(session: u16) -> u64 {
    tag(1, session, 0)
}

/// Receiver to sender: one [`Reply`] (before the session is known: 0).
pub fn reply_tag() -> u64 {
    tag(2, 0, 0)
}

/// Frame `number`'s bytes.
pub fn payload_tag(session: u16, number: u64) -> u64 {
    tag(3, session, number)
}

/// A frame's fields: what `rscudaipcsrc` pushes with its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FrameHeader {
    pub number: u64,
    pub size: u64,
    pub pts: Option<u64>,
    pub dts: Option<u64>,
    pub duration: Option<u64>,
    pub offset: u64,
    pub offset_end: u64,
    pub flags: u32,
    pub planes: Vec<(u64, u32)>,
    /// Frames the sender's side missed just before this one.
    pub missed_before: u64,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// The answer to a challenge: the version and the secret's proof
    /// (zeros without a secret).
    Hello {
        version: u32,
        proof: [u8; NONCE],
    },
    /// The frames that follow have these caps; `live`: the channel is live.
    Caps {
        caps: String,
        live: bool,
    },
    /// A frame; its bytes follow on [`payload_tag`] of its number.
    Frame(FrameHeader),
    /// A serialized event, between the frames around it.
    Event(Vec<u8>),
    Eos,
    /// The sending host's producer is gone.
    ProducerGone,
    /// Nothing to send for a while: the sender is alive.
    Heartbeat,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Prove the secret (`secret`: the receiver needs it) on this nonce,
    /// and tag what follows with `session`.
    Challenge {
        nonce: [u8; NONCE],
        secret: bool,
        session: u16,
    },
    Accepted,
    Refused(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a malformed message: {}", self.0)
    }
}

const NONE: u64 = u64::MAX;

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, Malformed> {
        Ok(self.take(1, what)?[0])
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn optional(&mut self, what: &'static str) -> Result<Option<u64>, Malformed> {
        Ok(Some(self.u64(what)?).filter(|&v| v != NONE))
    }
    fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], Malformed> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    fn nonce(&mut self, what: &'static str) -> Result<[u8; NONCE], Malformed> {
        Ok(self.take(NONCE, what)?.try_into().unwrap())
    }
    fn end(&self) -> Result<(), Malformed> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Malformed("bytes after the message"))
        }
    }
}

impl Control {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        match self {
            Self::Hello { version, proof } => {
                w.u8(1).u32(*version);
                w.0.extend_from_slice(proof);
            }
            Self::Caps { caps, live } => {
                w.u8(2).u8(*live as u8).bytes(caps.as_bytes());
            }
            Self::Frame(f) => {
                w.u8(3).u64(f.number).u64(f.size);
                for v in [f.pts, f.dts, f.duration] {
                    w.u64(v.unwrap_or(NONE));
                }
                w.u64(f.offset)
                    .u64(f.offset_end)
                    .u32(f.flags)
                    .u32(f.planes.len() as u32);
                for (offset, stride) in &f.planes {
                    w.u64(*offset).u32(*stride);
                }
                w.u64(f.missed_before).bytes(&f.data);
            }
            Self::Event(bytes) => {
                w.u8(4).bytes(bytes);
            }
            Self::Eos => {
                w.u8(5);
            }
            Self::ProducerGone => {
                w.u8(6);
            }
            Self::Heartbeat => {
                w.u8(7);
            }
        }
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, Malformed> {
        let mut r = Reader(bytes);
        let message = match r.u8("no kind")? {
            1 => Self::Hello {
                version: r.u32("hello")?,
                proof: r.nonce("hello")?,
            },
            2 => {
                let live = r.u8("caps")? != 0;
                let caps = std::str::from_utf8(r.bytes("caps")?)
                    .map_err(|_| Malformed("caps that are not UTF-8"))?;
                Self::Caps {
                    caps: caps.to_owned(),
                    live,
                }
            }
            3 => {
                let (number, size) = (r.u64("frame")?, r.u64("frame")?);
                let (pts, dts, duration) = (
                    r.optional("frame")?,
                    r.optional("frame")?,
                    r.optional("frame")?,
                );
                let (offset, offset_end, flags) =
                    (r.u64("frame")?, r.u64("frame")?, r.u32("frame")?);
                let count = r.u32("frame")? as usize;
                if count > MAX_PLANES {
                    return Err(Malformed("more planes than a video frame has"));
                }
                let mut planes = Vec::with_capacity(count);
                for _ in 0..count {
                    planes.push((r.u64("a plane")?, r.u32("a plane")?));
                }
                let missed_before = r.u64("frame")?;
                let data = r.bytes("frame data")?.to_vec();
                Self::Frame(FrameHeader {
                    number,
                    size,
                    pts,
                    dts,
                    duration,
                    offset,
                    offset_end,
                    flags,
                    planes,
                    missed_before,
                    data,
                })
            }
            4 => Self::Event(r.bytes("event")?.to_vec()),
            5 => Self::Eos,
            6 => Self::ProducerGone,
            7 => Self::Heartbeat,
            _ => return Err(Malformed("an unknown kind")),
        };
        r.end()?;
        Ok(message)
    }
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        match self {
            Self::Challenge {
                nonce,
                secret,
                session,
            } => {
                w.u8(1).u8(*secret as u8).u32(*session as u32);
                w.0.extend_from_slice(nonce);
            }
            Self::Accepted => {
                w.u8(2);
            }
            Self::Refused(why) => {
                w.u8(3).bytes(why.as_bytes());
            }
        }
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, Malformed> {
        let mut r = Reader(bytes);
        let reply = match r.u8("no kind")? {
            1 => {
                let secret = r.u8("challenge")? != 0;
                let session = u16::try_from(r.u32("challenge")?)
                    .map_err(|_| Malformed("a session beyond 16 bits"))?;
                Self::Challenge {
                    nonce: r.nonce("challenge")?,
                    secret,
                    session,
                }
            }
            2 => Self::Accepted,
            3 => Self::Refused(String::from_utf8_lossy(r.bytes("refusal")?).into_owned()),
            _ => return Err(Malformed("an unknown kind")),
        };
        r.end()?;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_decodes_to_itself() {
        let frame = FrameHeader {
            number: 41,
            size: 3840 * 2160 * 3,
            pts: Some(33_000_000),
            dts: None,
            duration: Some(33_333_333),
            offset: 7,
            offset_end: 8,
            flags: 0x40,
            planes: vec![(0, 11520)],
            missed_before: 3,
            data: vec![1, 2, 3],
        };
        for message in [
            Control::Hello {
                version: VERSION,
                proof: [9; NONCE],
            },
            Control::Caps {
                caps: "video/x-raw, format=(string)RGB".into(),
                live: true,
            },
            Control::Frame(frame),
            Control::Event(vec![5; 10]),
            Control::Eos,
            Control::ProducerGone,
            Control::Heartbeat,
        ] {
            assert_eq!(Control::decode(&message.encode()), Ok(message));
        }
        for reply in [
            Reply::Challenge {
                nonce: [3; NONCE],
                secret: true,
                session: 513,
            },
            Reply::Accepted,
            Reply::Refused("no".into()),
        ] {
            assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
        }
    }

    #[test]
    fn truncated_padded_or_oversized_messages_are_refused() {
        let caps = Control::Caps {
            caps: "video/x-raw".into(),
            live: false,
        }
        .encode();
        for cut in 0..caps.len() {
            assert!(Control::decode(&caps[..cut]).is_err(), "cut at {cut}");
        }
        let mut padded = caps.clone();
        padded.push(0);
        assert!(Control::decode(&padded).is_err());
        // A length field far beyond the message.
        let mut huge = vec![4];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Control::decode(&huge).is_err());
        let mut planes = Control::Frame(FrameHeader::default()).encode();
        // The plane count sits after the kind, 8 u64 fields... and flags.
        planes[1 + 7 * 8 + 4] = 200;
        assert!(Control::decode(&planes).is_err());
    }
}
