//! The names of the files of a sieve directory: made, parsed and classified here only.
//!
//! ```text
//! a-<gen>.log     an A generation (write-ahead log)        gen: 16 lower-case hex digits
//! r-<id>.run      an R run waiting for a merge             id: 16 lower-case hex digits
//! z-<id>.seg      a Z segment                              id: 16 lower-case hex digits
//! f-<id>.log      an F segment (frontier)                  id: 16 lower-case hex digits
//! q-<id>.run      a Q run of a frontier's queues           id: 16 lower-case hex digits
//! j-<gen>.log     a generation of a frontier's journal J    gen: 16 lower-case hex digits
//! MANIFEST        the commit point
//! CURSOR          the consumer's position in F
//! LOCK            the directory's lock
//! CHECKPOINT      a frontier's checkpoint
//! merge.tmp       a merge's scratch file (new positions)
//! <name>.tmp      an atomic replace under way (MANIFEST.tmp, CURSOR.tmp)
//! ```
//!
//! Ids of Z segments, R runs and F segments come from one counter (the manifest's
//! `next_id`); A generations are numbered on their own. Nothing in a directory is named
//! otherwise, so a file of any other name means the directory is not a sieve.

/// The manifest.
pub const MANIFEST: &str = "MANIFEST";
/// The consumer's cursor.
pub const CURSOR: &str = "CURSOR";
/// The directory's lock.
pub const LOCK: &str = "LOCK";
/// The frontier's checkpoint.
pub const CHECKPOINT: &str = "CHECKPOINT";
/// The scratch file of a merge: the new positions of each source.
pub const SCRATCH: &str = "merge.tmp";

/// A file of a sieve directory, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileName {
    /// `a-<gen>.log`.
    A(u64),
    /// `r-<id>.run`.
    R(u64),
    /// `z-<id>.seg`.
    Z(u64),
    /// `f-<id>.log`.
    F(u64),
    /// `q-<id>.run`.
    Q(u64),
    /// `j-<gen>.log`.
    J(u64),
    /// `MANIFEST`.
    Manifest,
    /// `CURSOR`.
    Cursor,
    /// `LOCK`.
    Lock,
    /// `CHECKPOINT`.
    Checkpoint,
    /// `*.tmp`: a merge's scratch file or an atomic replace under way.
    Temp,
}

/// The name of A generation `gen`.
pub fn a(gen: u64) -> String {
    format!("a-{gen:016x}.log")
}

/// The name of R run `id`.
pub fn r(id: u64) -> String {
    format!("r-{id:016x}.run")
}

/// The name of Z segment `id`.
pub fn z(id: u64) -> String {
    format!("z-{id:016x}.seg")
}

/// The name of F segment `id`.
pub fn f(id: u64) -> String {
    format!("f-{id:016x}.log")
}

/// The name of spool file `n` of `uniq`, which copies a piped input into its scratch
/// directory (never a sieve directory).
pub fn spool(n: u64) -> String {
    format!("spool-{n}")
}

/// The name of Q run `id`.
pub fn q(id: u64) -> String {
    format!("q-{id:016x}.run")
}

/// The name of generation `gen` of the journal J.
pub fn j(gen: u64) -> String {
    format!("j-{gen:016x}.log")
}

/// The temporary name under which `name` is written before it replaces `name`.
pub fn tmp(name: &str) -> String {
    format!("{name}.tmp")
}

/// Parses `<prefix><16 hex digits><suffix>`.
fn numbered(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let hex = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    let digits = hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    digits.then(|| u64::from_str_radix(hex, 16).ok())?
}

/// What `name` is, if it is a name crivello gives a file.
pub fn parse(name: &str) -> Option<FileName> {
    Some(match name {
        MANIFEST => FileName::Manifest,
        CURSOR => FileName::Cursor,
        LOCK => FileName::Lock,
        CHECKPOINT => FileName::Checkpoint,
        _ if name.ends_with(".tmp") => FileName::Temp,
        _ => {
            if let Some(g) = numbered(name, "a-", ".log") {
                FileName::A(g)
            } else if let Some(id) = numbered(name, "r-", ".run") {
                FileName::R(id)
            } else if let Some(id) = numbered(name, "z-", ".seg") {
                FileName::Z(id)
            } else if let Some(id) = numbered(name, "q-", ".run") {
                FileName::Q(id)
            } else if let Some(g) = numbered(name, "j-", ".log") {
                FileName::J(g)
            } else {
                FileName::F(numbered(name, "f-", ".log")?)
            }
        }
    })
}

/// The generation of an A file name.
pub fn parse_a(name: &str) -> Option<u64> {
    match parse(name)? {
        FileName::A(g) => Some(g),
        _ => None,
    }
}

/// The id of an F segment's name.
pub fn parse_f(name: &str) -> Option<u64> {
    match parse(name)? {
        FileName::F(id) => Some(id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_made_parses_back_and_nothing_else_does() {
        for id in [0, 1, 0xabc, u64::MAX] {
            assert_eq!(parse(&a(id)), Some(FileName::A(id)));
            assert_eq!(parse(&r(id)), Some(FileName::R(id)));
            assert_eq!(parse(&z(id)), Some(FileName::Z(id)));
            assert_eq!(parse(&f(id)), Some(FileName::F(id)));
            assert_eq!(parse(&q(id)), Some(FileName::Q(id)));
            assert_eq!(parse(&j(id)), Some(FileName::J(id)));
        }
        assert_eq!(parse(MANIFEST), Some(FileName::Manifest));
        assert_eq!(parse(CURSOR), Some(FileName::Cursor));
        assert_eq!(parse(LOCK), Some(FileName::Lock));
        assert_eq!(parse(SCRATCH), Some(FileName::Temp));
        assert_eq!(parse(&tmp(MANIFEST)), Some(FileName::Temp));
        for other in [
            "a-1.log",
            "a-000000000000000G.log",
            "a-000000000000000A.log",
            "z-0000000000000001.log",
            "f-0000000000000001.seg",
            "notes.txt",
            "",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }
}
