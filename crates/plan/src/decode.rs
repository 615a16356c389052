//! Content codings of a response body (`compression`): push decoders that
//! write into a sink which refuses anything past the body limit, so a
//! decompression bomb costs at most the limit in memory and stops the
//! decoder (and the read) as soon as it is reached.

use std::io::{self, Write};

use http::HeaderValue;

/// A content coding (RFC 9110 8.4.1) the prober can ask for and decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Gzip,
    /// The zlib format (RFC 1950), as RFC 9110 says; a raw deflate stream,
    /// which some servers send instead, is decoded too.
    Deflate,
    Br,
    Zstd,
}

impl Coding {
    /// The value of `Accept-Encoding` that asks for this coding.
    pub fn accept_encoding(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Coding::Identity => "identity",
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
            Coding::Br => "br",
            Coding::Zstd => "zstd",
        })
    }

    /// The coding of a `Content-Encoding` value; `None` when it is not one
    /// of these (unknown, or several codings stacked).
    pub fn of_response(v: &HeaderValue) -> Option<Coding> {
        let v = v.to_str().ok()?.trim();
        let is = |name: &str| v.eq_ignore_ascii_case(name);
        Some(if v.is_empty() || is("identity") {
            Coding::Identity
        } else if is("gzip") || is("x-gzip") {
            Coding::Gzip
        } else if is("deflate") {
            Coding::Deflate
        } else if is("br") {
            Coding::Br
        } else if is("zstd") {
            Coding::Zstd
        } else {
            return None;
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
            Coding::Br => "br",
            Coding::Zstd => "zstd",
        }
    }
}

/// The largest zstd window accepted: 8 MiB, what RFC 9659 asks HTTP
/// encoders to stay within (zstd's own default would allow 128 MiB).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// Decoded bytes, kept (when a check reads them) up to `limit`. Writing past
/// the limit fails, which stops the decoder in the middle of its output.
#[derive(Default)]
struct Sink {
    kept: Vec<u8>,
    keep: bool,
    limit: usize,
    written: usize,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.limit - self.written;
        if room == 0 && !buf.is_empty() {
            return Err(io::Error::other("body limit reached"));
        }
        let n = buf.len().min(room);
        if self.keep {
            self.kept.extend_from_slice(&buf[..n]);
        }
        self.written += n;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `deflate` (zlib or raw), on flate2's low-level API: its writers do not
/// tell a stream that ended from one that was cut.
struct Inflate {
    d: flate2::Decompress,
    sink: Sink,
    out: Box<[u8]>,
    ended: bool,
}

impl Inflate {
    fn new(sink: Sink, zlib: bool) -> Inflate {
        Inflate {
            d: flate2::Decompress::new(zlib),
            sink,
            out: vec![0; 16 * 1024].into_boxed_slice(),
            ended: false,
        }
    }

    /// Bytes after the end of the stream are ignored, as zlib's tools do.
    fn write_all(&mut self, mut input: &[u8]) -> io::Result<()> {
        while !self.ended {
            let (in0, out0) = (self.d.total_in(), self.d.total_out());
            let status = self
                .d
                .decompress(input, &mut self.out, flate2::FlushDecompress::None)
                .map_err(io::Error::other)?;
            let used = (self.d.total_in() - in0) as usize;
            let made = (self.d.total_out() - out0) as usize;
            input = &input[used.min(input.len())..];
            self.sink.write_all(&self.out[..made])?;
            self.ended = status == flate2::Status::StreamEnd;
            // A full output buffer may leave output pending: go on even
            // when the input is used up.
            if input.is_empty() && made < self.out.len() {
                break;
            }
            if used == 0 && made == 0 {
                return Err(io::Error::other("no progress"));
            }
        }
        Ok(())
    }
}

enum Inner {
    Gzip(flate2::write::MultiGzDecoder<Sink>),
    /// `deflate` before its first two bytes told zlib from raw deflate.
    DeflateStart(Sink, Vec<u8>),
    Deflate(Box<Inflate>),
    Br(Box<brotli_decompressor::DecompressorWriter<Sink>>),
    Zstd(zstd::stream::write::Decoder<'static, Sink>),
}

/// One response body being decoded.
pub struct Decoder {
    inner: Inner,
    coding: Coding,
    /// Encoded bytes taken.
    pub encoded: usize,
}

/// The body is not valid in its coding (the coding's name).
#[derive(Debug)]
pub struct Invalid(pub &'static str);

impl Decoder {
    /// A decoder of `coding` (not `Identity`) that keeps (when `keep`) and
    /// produces at most `limit` decoded bytes.
    pub fn new(coding: Coding, limit: usize, keep: bool) -> Decoder {
        let sink = Sink {
            keep,
            limit,
            ..Sink::default()
        };
        let inner = match coding {
            Coding::Gzip | Coding::Identity => {
                Inner::Gzip(flate2::write::MultiGzDecoder::new(sink))
            }
            Coding::Deflate => Inner::DeflateStart(sink, Vec::with_capacity(2)),
            Coding::Br => Inner::Br(Box::new(brotli_decompressor::DecompressorWriter::new(
                sink, 8192,
            ))),
            Coding::Zstd => match zstd::stream::write::Decoder::new(sink) {
                Ok(mut d) => {
                    let _ = d.window_log_max(ZSTD_WINDOW_LOG_MAX);
                    Inner::Zstd(d)
                }
                // No context (out of memory): every push fails as invalid.
                Err(_) => Inner::DeflateStart(Sink::default(), vec![0, 0, 0]),
            },
        };
        Decoder {
            inner,
            coding,
            encoded: 0,
        }
    }

    fn sink(&mut self) -> &mut Sink {
        match &mut self.inner {
            Inner::Gzip(d) => d.get_mut(),
            Inner::DeflateStart(s, _) => s,
            Inner::Deflate(d) => &mut d.sink,
            Inner::Br(d) => d.get_mut(),
            Inner::Zstd(d) => d.get_mut(),
        }
    }

    /// The decoded output reached the limit: read no further.
    pub fn full(&mut self) -> bool {
        let s = self.sink();
        s.written >= s.limit
    }

    /// Decodes the next encoded bytes.
    pub fn push(&mut self, data: &[u8]) -> Result<(), Invalid> {
        self.encoded += data.len();
        let Inner::DeflateStart(_, head) = &mut self.inner else {
            return self.write(data);
        };
        if head.len() > 2 {
            return Err(Invalid(self.coding.name()));
        }
        let take = data.len().min(2 - head.len());
        head.extend_from_slice(&data[..take]);
        if head.len() < 2 {
            return Ok(());
        }
        let Inner::DeflateStart(sink, head) = std::mem::replace(
            &mut self.inner,
            Inner::DeflateStart(Sink::default(), vec![]),
        ) else {
            return Err(Invalid(self.coding.name()));
        };
        // A zlib header: compression method 8 and the two bytes, read as a
        // number, a multiple of 31 (RFC 1950 2.2).
        let zlib = head[0] & 0x0f == 8 && (u16::from(head[0]) << 8 | u16::from(head[1])) % 31 == 0;
        self.inner = Inner::Deflate(Box::new(Inflate::new(sink, zlib)));
        self.write(&head)?;
        self.write(&data[take..])
    }

    fn write(&mut self, data: &[u8]) -> Result<(), Invalid> {
        let r = match &mut self.inner {
            Inner::Gzip(d) => d.write_all(data),
            Inner::Deflate(d) => d.write_all(data),
            Inner::Br(d) => d.write_all(data),
            Inner::Zstd(d) => d.write_all(data),
            Inner::DeflateStart(..) => Err(io::Error::other("no decoder")),
        };
        match r {
            Ok(()) => Ok(()),
            // The sink refused: the limit, not a broken stream.
            Err(_) if self.full() => Ok(()),
            Err(_) => Err(Invalid(self.coding.name())),
        }
    }

    /// The decoded bytes kept. `whole`: the encoded body was read to its
    /// end, so the stream must be complete (unless the limit cut the output).
    pub fn finish(mut self, whole: bool) -> Result<Vec<u8>, Invalid> {
        let complete = !whole
            || self.encoded == 0
            || match &mut self.inner {
                Inner::Gzip(d) => d.try_finish().is_ok(),
                Inner::Deflate(d) => d.ended,
                Inner::Br(d) => d.close().is_ok(),
                Inner::Zstd(d) => d.do_finish().is_ok(),
                // Fewer than two bytes of deflate are never a whole stream.
                Inner::DeflateStart(..) => false,
            };
        if !complete && !self.full() {
            return Err(Invalid(self.coding.name()));
        }
        Ok(std::mem::take(&mut self.sink().kept))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(coding: Coding, data: &[u8]) -> Vec<u8> {
        use flate2::Compression;
        match coding {
            Coding::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), Compression::fast());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Coding::Deflate => {
                let mut e = flate2::write::ZlibEncoder::new(Vec::new(), Compression::fast());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Coding::Br => {
                let mut out = Vec::new();
                let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
                w.write_all(data).unwrap();
                drop(w);
                out
            }
            Coding::Zstd => zstd::encode_all(data, 3).unwrap(),
            Coding::Identity => data.to_vec(),
        }
    }

    /// Pushes `encoded` in chunks of `chunk` bytes, as frames would come.
    fn decode(
        coding: Coding,
        encoded: &[u8],
        limit: usize,
        chunk: usize,
    ) -> Result<Vec<u8>, Invalid> {
        let mut d = Decoder::new(coding, limit, true);
        for c in encoded.chunks(chunk) {
            d.push(c)?;
            if d.full() {
                break;
            }
        }
        d.finish(true)
    }

    const ALL: [Coding; 4] = [Coding::Gzip, Coding::Deflate, Coding::Br, Coding::Zstd];

    #[test]
    fn every_coding_round_trips_in_any_chunking() {
        let text: Vec<u8> = (0..20_000u32)
            .flat_map(|i| i.to_string().into_bytes())
            .collect();
        for coding in ALL {
            let enc = encode(coding, &text);
            for chunk in [1, 7, 4096, enc.len()] {
                let got = decode(coding, &enc, 1 << 20, chunk)
                    .unwrap_or_else(|e| panic!("{coding:?} in chunks of {chunk}: {e:?}"));
                assert!(got == text, "{coding:?} in chunks of {chunk}");
            }
        }
        // Raw deflate, which some servers send as `deflate`.
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&text).unwrap();
        let raw = e.finish().unwrap();
        assert!(decode(Coding::Deflate, &raw, 1 << 20, 3).unwrap() == text);
        // Two gzip members are one body.
        let two = [encode(Coding::Gzip, b"ab"), encode(Coding::Gzip, b"cd")].concat();
        assert_eq!(decode(Coding::Gzip, &two, 100, 5).unwrap(), b"abcd");
    }

    #[test]
    fn a_bomb_stops_at_the_limit() {
        let zeros = vec![0u8; 8 << 20];
        for coding in ALL {
            let enc = encode(coding, &zeros);
            assert!(enc.len() < 64 << 10, "{coding:?}: {}", enc.len());
            let mut d = Decoder::new(coding, 65536, true);
            let mut pushed = 0;
            for c in enc.chunks(1) {
                d.push(c).unwrap();
                pushed += c.len();
                if d.full() {
                    break;
                }
            }
            assert!(d.full(), "{coding:?}");
            if coding == Coding::Gzip {
                // 8 KiB of input make 8 MiB: 64 KiB come from the first few hundred bytes.
                assert!(pushed < enc.len() / 8, "{pushed} of {}", enc.len());
            }
            assert_eq!(d.sink().written, 65536);
            assert_eq!(d.finish(true).unwrap().len(), 65536);
        }
    }

    #[test]
    fn broken_and_cut_streams_are_invalid() {
        for coding in ALL {
            let enc = encode(coding, b"hello world, hello world");
            assert!(
                decode(coding, &enc[..enc.len() - 3], 100, 4).is_err(),
                "{coding:?} cut"
            );
            let mut bad = enc.clone();
            for b in bad.iter_mut().skip(4) {
                *b ^= 0x5a;
            }
            assert!(
                decode(coding, &bad, 1 << 20, 4).is_err(),
                "{coding:?} garbled"
            );
            assert!(decode(coding, b"", 100, 4).unwrap().is_empty());
        }
    }

    #[test]
    fn content_encoding_values() {
        let of = |v: &str| Coding::of_response(&HeaderValue::from_str(v).unwrap());
        assert_eq!(of("GZIP"), Some(Coding::Gzip));
        assert_eq!(of("x-gzip"), Some(Coding::Gzip));
        assert_eq!(of(" br "), Some(Coding::Br));
        assert_eq!(of("identity"), Some(Coding::Identity));
        assert_eq!(of("gzip, br"), None);
        assert_eq!(of("compress"), None);
    }
}
