//! Processes the host starts in a running VM (`onering exec`, the OCI runtime's
//! `exec`): the VMM queues messages for the kernel and sets
//! [`crate::events::EXEC`]; the kernel takes them one at a time with
//! [`crate::Hostcall::ExecTake`] and reports how each process ended with
//! [`crate::Hostcall::ExecDone`].
//!
//! A message is four little-endian u64 words, `[kind, slot, a, b]`, then data:
//! - [`SPAWN`]: `a` the kinds of the process's standard streams (a
//!   [`crate::stdio`] kind per descriptor 0-2, as `BootInfo::stdio`), `b` the
//!   number of arguments; then NUL-ended strings: the working directory, the
//!   arguments, the environment (the rest).
//! - [`SIGNAL`]: signal `a` for the process of `slot`.
//!
//! Each request has a slot (below [`MAX_EXECS`]); its standard streams are the
//! host streams [`stream`]`(slot, fd)`, which the `Write` (1 and 2), `StdioStat`,
//! `StdioSeek`, `StdioIoctl` and `StdinRequest` (0) hostcalls take beside 0, 1
//! and 2. The stdins are numbered as inputs ([`input_of`]): 0 the program's,
//! 1 + slot each slot's; an input's request result has its own word and bits
//! in the events page (`crate::events::result_word`, `done_bit`, `ready_bit`).

use alloc::vec::Vec;

/// Most processes started from the host at once.
pub const MAX_EXECS: u64 = 8;
/// Message kinds.
pub const SPAWN: u64 = 1;
pub const SIGNAL: u64 = 2;
/// Most bytes of one message (the kernel's buffer; the VMM refuses larger requests).
pub const MAX_MESSAGE: usize = 64 * 1024;
/// `ExecDone`'s `args[1]`: the process ended, `args[2]` its wait status (Linux's
/// encoding: exit code << 8, or the signal).
pub const ENDED: u64 = 0;
/// `ExecDone`'s `args[1]`: the program could not be started, `args[2]` the errno.
pub const FAILED: u64 = 1;
/// `ExecDone`'s `args[1]`: the program was loaded (it runs), `args[2]` its pid
/// in the VM; the slot stays the process's.
pub const STARTED: u64 = 2;
/// The system call a process the host started makes first (its thread starts at
/// a `syscall` instruction with this number): the kernel loads its program.
/// Any other caller gets ENOSYS.
pub const START_SYSCALL: u64 = 0x6f6e_0002;

/// The host stream of descriptor `fd` (0-2) of slot `slot`'s process.
pub const fn stream(slot: u64, fd: u64) -> u64 {
    3 + 3 * slot + fd
}

/// The slot and descriptor of host stream `s`, if it is a slot's.
pub const fn slot_of(s: u64) -> Option<(u64, u64)> {
    if s < 3 || s >= stream(MAX_EXECS, 0) {
        return None;
    }
    Some(((s - 3) / 3, (s - 3) % 3))
}

/// Stdins with requests of their own: the program's, then one per slot.
pub const INPUTS: usize = 1 + MAX_EXECS as usize;

/// The input of host stream `s`: 0 for the program's stdin, 1 + slot for a
/// slot's descriptor 0; None for any other stream.
pub const fn input_of(s: u64) -> Option<usize> {
    match (s, slot_of(s)) {
        (0, _) => Some(0),
        (_, Some((slot, 0))) => Some(1 + slot as usize),
        _ => None,
    }
}

/// The host stream of input `input` (below [`INPUTS`]).
pub const fn input_stream(input: usize) -> u64 {
    match input {
        0 => 0,
        n => stream(n as u64 - 1, 0),
    }
}

/// A process to start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spawn {
    pub slot: u64,
    pub stdio: u64,
    pub cwd: Vec<u8>,
    pub argv: Vec<Vec<u8>>,
    pub envp: Vec<Vec<u8>>,
}

/// A message, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Spawn(Spawn),
    Signal { slot: u64, signal: u64 },
}

fn header(out: &mut Vec<u8>, words: [u64; 4]) {
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

impl Message {
    /// Its bytes (strings may not hold a NUL: the encoder's caller checks).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Message::Signal { slot, signal } => header(&mut out, [SIGNAL, *slot, *signal, 0]),
            Message::Spawn(s) => {
                header(&mut out, [SPAWN, s.slot, s.stdio, s.argv.len() as u64]);
                for b in core::iter::once(&s.cwd).chain(&s.argv).chain(&s.envp) {
                    out.extend_from_slice(b);
                    out.push(0);
                }
            }
        }
        out
    }

    /// Decodes `b`; None when it is not a well-formed message.
    pub fn decode(b: &[u8]) -> Option<Message> {
        let word = |i: usize| Some(u64::from_le_bytes(b.get(8 * i..8 * i + 8)?.try_into().ok()?));
        let (kind, slot, a, n) = (word(0)?, word(1)?, word(2)?, word(3)?);
        if slot >= MAX_EXECS {
            return None;
        }
        match kind {
            SIGNAL => Some(Message::Signal { slot, signal: a }),
            SPAWN => {
                let data = &b[32..];
                if data.last() != Some(&0) {
                    return None;
                }
                let mut strings = data[..data.len() - 1].split(|c| *c == 0).map(<[u8]>::to_vec);
                let cwd = strings.next()?;
                let argv: Vec<Vec<u8>> = strings.by_ref().take(n.min(b.len() as u64) as usize).collect();
                if argv.len() as u64 != n || argv.is_empty() {
                    return None;
                }
                Some(Message::Spawn(Spawn { slot, stdio: a, cwd, argv, envp: strings.collect() }))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn messages_round_trip() {
        let s = Message::Spawn(Spawn {
            slot: 3,
            stdio: 0x020204,
            cwd: b"/".to_vec(),
            argv: vec![b"/bin/sh".to_vec(), b"-c".to_vec(), b"".to_vec()],
            envp: vec![b"A=1".to_vec()],
        });
        assert_eq!(Message::decode(&s.encode()), Some(s));
        let none = Message::Spawn(Spawn { argv: vec![b"x".to_vec()], ..Default::default() });
        assert_eq!(Message::decode(&none.encode()), Some(none));
        let k = Message::Signal { slot: 1, signal: 15 };
        assert_eq!(Message::decode(&k.encode()), Some(k));
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(Message::decode(&[]), None);
        assert_eq!(Message::decode(&[0xff; 40]), None);
        let mut b = Message::Signal { slot: MAX_EXECS, signal: 1 }.encode();
        assert_eq!(Message::decode(&b), None);
        b = Message::Spawn(Spawn { argv: vec![b"x".to_vec()], ..Default::default() }).encode();
        b[24] = 5; // more arguments than strings
        assert_eq!(Message::decode(&b), None);
        b.pop(); // no final NUL
        assert_eq!(Message::decode(&b), None);
        assert_eq!(stream(0, 1), 4);
        assert_eq!(slot_of(stream(7, 2)), Some((7, 2)));
        assert_eq!(slot_of(2), None);
        assert_eq!(slot_of(stream(MAX_EXECS, 0)), None);
    }

    #[test]
    fn inputs_are_the_stdins_and_have_their_own_event_words_and_bits() {
        use crate::events::{done_bit, ready_bit, result_word};
        assert_eq!(input_of(0), Some(0));
        assert_eq!((input_of(1), input_of(2)), (None, None), "only stdins are inputs");
        assert_eq!(input_of(stream(0, 1)), None);
        assert_eq!(input_of(stream(MAX_EXECS, 0)), None);
        assert_eq!(input_of(u64::MAX), None);
        let mut bits = 0u64;
        let mut words = alloc::collections::BTreeSet::new();
        for i in 0..INPUTS {
            assert_eq!(input_of(input_stream(i)), Some(i));
            for b in [done_bit(i), ready_bit(i)] {
                assert_eq!(b.count_ones(), 1);
                assert_eq!(bits & b, 0, "input {i}: a bit of its own");
                bits |= b;
            }
            let w = result_word(i);
            assert!(w.is_multiple_of(8) && w + 8 <= 4096 && words.insert(w));
        }
        assert_eq!(input_of(stream(MAX_EXECS - 1, 0)), Some(INPUTS - 1));
        let others = [crate::events::PENDING, crate::events::SIGNALS, crate::events::TTY_SIGNALS];
        assert!(others.iter().all(|w| !words.contains(w)));
        assert_eq!(bits & (crate::events::SIGNAL | crate::events::EXEC), 0);
        let exec_bits = crate::events::EXEC_STDIN | crate::events::EXEC_STDIN_READY;
        assert_eq!(bits & !exec_bits, crate::events::STDIN | crate::events::STDIN_READY);
    }
}
