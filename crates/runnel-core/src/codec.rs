//! A small, explicit binary encoding for logged entries: little-endian
//! fixed-width integers, length-prefixed UTF-8 strings, one-byte flags.
//! Hand-written so the on-disk format is visible in one file and stable.

/// Why bytes could not be decoded as an entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("entry ends early")]
    Truncated,
    #[error("entry format version {0} is unknown")]
    UnknownVersion(u8),
    #[error("entry kind {0} is unknown")]
    UnknownTag(u8),
    #[error("entry holds a string that is not UTF-8")]
    BadUtf8,
    #[error("entry holds an invalid flag byte {0}")]
    BadFlag(u8),
    #[error("entry has trailing bytes")]
    TrailingBytes,
    #[error("entry holds an invalid value: {0}")]
    Invalid(&'static str),
}

pub(crate) struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// Writes after whatever `buf` already holds.
    pub fn wrap(buf: Vec<u8>) -> Self {
        Writer { buf }
    }
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn bool(&mut self, v: bool) {
        self.buf.push(v as u8);
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn str(&mut self, v: &str) {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v.as_bytes());
    }
    /// Bytes of any length: a `u64` length, then the bytes.
    pub fn blob(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.buf.extend_from_slice(v);
    }
    pub fn opt_str(&mut self, v: Option<&str>) {
        self.bool(v.is_some());
        if let Some(v) = v {
            self.str(v);
        }
    }
    pub fn opt_u64(&mut self, v: Option<u64>) {
        self.bool(v.is_some());
        if let Some(v) = v {
            self.u64(v);
        }
    }
    pub fn opt_i64(&mut self, v: Option<i64>) {
        self.bool(v.is_some());
        if let Some(v) = v {
            self.i64(v);
        }
    }
    pub fn u32_list(&mut self, v: &[u32]) {
        self.u32(v.len() as u32);
        for x in v {
            self.u32(*x);
        }
    }
    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn raw(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self.pos.checked_add(n).ok_or(CodecError::Truncated)?;
        let slice = self.bytes.get(self.pos..end).ok_or(CodecError::Truncated)?;
        self.pos = end;
        Ok(slice)
    }
    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    pub fn bool(&mut self) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(CodecError::BadFlag(other)),
        }
    }
    pub fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn i64(&mut self) -> Result<i64, CodecError> {
        Ok(i64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
    pub fn string(&mut self) -> Result<String, CodecError> {
        let len = self.u32()? as usize;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| CodecError::BadUtf8)
    }
    /// Bytes written by [`Writer::blob`].
    pub fn blob(&mut self) -> Result<Vec<u8>, CodecError> {
        let len = usize::try_from(self.u64()?).map_err(|_| CodecError::Invalid("blob length"))?;
        Ok(self.take(len)?.to_vec())
    }
    pub fn opt_string(&mut self) -> Result<Option<String>, CodecError> {
        if self.bool()? {
            self.string().map(Some)
        } else {
            Ok(None)
        }
    }
    pub fn opt_u64(&mut self) -> Result<Option<u64>, CodecError> {
        if self.bool()? {
            self.u64().map(Some)
        } else {
            Ok(None)
        }
    }
    pub fn opt_i64(&mut self) -> Result<Option<i64>, CodecError> {
        if self.bool()? {
            self.i64().map(Some)
        } else {
            Ok(None)
        }
    }
    pub fn u32_list(&mut self) -> Result<Vec<u32>, CodecError> {
        let count = self.u32()? as usize;
        // Each element needs 4 bytes: refuse counts the input cannot hold
        // before allocating for them.
        if count > self.bytes.len().saturating_sub(self.pos) / 4 {
            return Err(CodecError::Truncated);
        }
        (0..count).map(|_| self.u32()).collect()
    }
    /// The remaining bytes (copied when `copy`), without consuming them.
    pub fn rest(&self, copy: bool) -> Vec<u8> {
        if copy {
            self.bytes[self.pos..].to_vec()
        } else {
            Vec::new()
        }
    }
    /// Position where the unconsumed remainder starts.
    pub fn data_start(&self) -> usize {
        self.pos
    }
    pub fn expect_end(&self) -> Result<(), CodecError> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(CodecError::TrailingBytes)
        }
    }
}
