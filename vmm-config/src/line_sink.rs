//! Whole lines to a file that may be a FIFO nobody reads (the log and metrics files, opened
//! non-blocking as Firecracker opens them). A pipe takes a write of up to `PIPE_BUF` (4 KiB)
//! whole or not at all, but a longer line (a metrics line is ~10 KiB) in part: the reader would
//! then see that part glued to whatever comes next, losing both lines. A [`LineSink`] finishes
//! a line it started before any other line, and drops the lines that arrive meanwhile (the
//! caller counts them), so what the reader gets is always whole lines.

use std::fs::File;
use std::io::{ErrorKind, Write};

/// Why a line was not written.
#[derive(Debug, thiserror::Error)]
pub enum LineDropped {
    /// The file took none of it (a full FIFO: `EAGAIN`), or the line before it is still
    /// unfinished.
    #[error("the file is full")]
    Full,
    /// Writing failed.
    #[error("{0}")]
    Io(#[source] std::io::Error),
}

/// A file written one whole line at a time.
#[derive(Debug)]
pub struct LineSink {
    file: File,
    /// The unwritten end of the line the file took in part.
    unfinished: Vec<u8>,
}

impl LineSink {
    /// Lines to `file`.
    pub fn new(file: File) -> Self {
        Self {
            file,
            unfinished: Vec::new(),
        }
    }

    /// The file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Writes `line` (which ends with its newline) in one call, after finishing the line before
    /// it. A line the file takes in part is finished by the next calls (and [`Self::finish`]),
    /// before any other line.
    pub fn write_line(&mut self, line: &[u8]) -> Result<(), LineDropped> {
        if !self.finish() {
            return Err(LineDropped::Full);
        }
        match write_some(&mut self.file, line) {
            Ok(0) if !line.is_empty() => Err(LineDropped::Full),
            Ok(n) => {
                self.unfinished.extend_from_slice(&line[n..]);
                Ok(())
            }
            Err(e) => Err(LineDropped::Io(e)),
        }
    }

    /// Writes what the file can take of an unfinished line; whether none is left.
    pub fn finish(&mut self) -> bool {
        while !self.unfinished.is_empty() {
            match write_some(&mut self.file, &self.unfinished) {
                Ok(0) => return false,
                Ok(n) => {
                    self.unfinished.drain(..n);
                }
                // Its reader gone or the file broken: the line cannot be finished, and a line
                // after it would be glued to its start anyway if the file came back.
                Err(_) => return false,
            }
        }
        true
    }
}

/// One `write`: the bytes the file took, 0 when it is full.
fn write_some(file: &mut File, buf: &[u8]) -> std::io::Result<usize> {
    loop {
        match file.write(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;

    /// A FIFO in a fresh folder, its reader end (non-blocking) and its writer end as the log
    /// and metrics files open it.
    fn fifo() -> (std::path::PathBuf, File, File) {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("osprey-lines-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("fifo");
        let c = std::ffi::CString::new(path.to_str().expect("utf-8")).expect("path");
        // SAFETY: mkfifo reads a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .expect("reader");
        let writer = crate::logger::open_nonblocking(&path).expect("writer");
        (dir, reader, writer)
    }

    fn drain(reader: &mut File, into: &mut Vec<u8>) {
        let mut buf = [0u8; 65536];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.extend_from_slice(&buf[..n]);
        }
    }

    /// Line `i`: 10,000 bytes of its own digit, a newline.
    fn line(i: usize) -> Vec<u8> {
        let mut l = vec![b'0' + (i % 10) as u8; 10_000];
        l.push(b'\n');
        l
    }

    /// Lines longer than PIPE_BUF into a FIFO that fills: every line read is whole, and every
    /// line is either read or reported dropped.
    #[test]
    fn a_full_fifo_gets_whole_lines_only() {
        let (dir, mut reader, writer) = fifo();
        let mut sink = LineSink::new(writer);
        let (mut read, mut dropped) = (Vec::new(), 0);
        for i in 0..60 {
            if sink.write_line(&line(i)).is_err() {
                dropped += 1;
            }
            // The reader falls behind, then catches up.
            if i % 20 == 19 {
                drain(&mut reader, &mut read);
            }
        }
        assert!(sink.finish());
        drain(&mut reader, &mut read);
        assert!(dropped > 0, "the FIFO never filled");
        let lines: Vec<&[u8]> = read
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        for l in &lines {
            assert_eq!(l.len(), 10_000, "a line glued or cut");
            assert!(l.iter().all(|b| *b == l[0]), "a line glued to another");
        }
        assert_eq!(lines.len() + dropped, 60);
        let _ = std::fs::remove_dir_all(dir);
    }
}
