//! The sampling profiler's pure half: what a sample is, how samples add up, how
//! addresses get names, and the two reports (`--profile FILE`: folded stacks and an
//! SVG flame graph drawn by `inferno`; `--profile-top N`: the hottest functions).
//!
//! Samples are taken by `vstate::sampler` (a vCPU's registers and the frame-pointer
//! chain it reads from guest memory); here they are only counted and named. Because
//! the program and the kernel share one address space, one stack holds both: the
//! kernel's functions (above `KERNEL_VBASE`, named from the embedded kernel's symbol
//! table) sit on top of the program's that called them. Names are looked up after
//! the run, never while the guest runs.

use std::collections::HashMap;
use std::fmt::Write as _;

/// Frames kept per sample (deeper stacks are cut at the root end).
pub const MAX_FRAMES: usize = 96;

/// Counted samples: (vCPU, stack with the sampled instruction first) -> samples.
/// A stack read once may count for several samples (the sampling periods it
/// stands for: `vstate::sampler`).
#[derive(Default)]
pub struct Samples {
    counts: HashMap<(u64, Vec<u64>), u64>,
    total: u64,
    stacks: u64,
}

impl Samples {
    /// One stack read on vCPU `cpu`, counting for `n` samples.
    pub fn add(&mut self, cpu: u64, stack: Vec<u64>, n: u64) {
        *self.counts.entry((cpu, stack)).or_insert(0) += n;
        self.total += n;
        self.stacks += 1;
    }

    /// Samples, counted in sampling periods.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Stacks read (each an exit of a vCPU).
    pub fn stacks(&self) -> u64 {
        self.stacks
    }

    /// Samples by the sampled instruction's address, most first (for reading a hot
    /// function instruction by instruction).
    pub fn leaves(&self) -> Vec<(u64, u64)> {
        let mut by: HashMap<u64, u64> = HashMap::new();
        for ((_, stack), n) in &self.counts {
            if let Some(a) = stack.first() {
                *by.entry(*a).or_insert(0) += n;
            }
        }
        let mut v: Vec<(u64, u64)> = by.into_iter().collect();
        v.sort_by_key(|a| std::cmp::Reverse(a.1));
        v
    }
}

/// Names addresses: the program's function symbols (loaded addresses) and a lookup
/// for the kernel's.
pub struct Symbols {
    /// (start, end, name), sorted by start.
    program: Vec<(u64, u64, String)>,
    kernel: fn(u64) -> Option<&'static str>,
    kernel_base: u64,
}

impl Symbols {
    /// `program`: `(address, size, name)` as in the file, moved by `bias`.
    pub fn new(
        program: Vec<(u64, u64, String)>,
        bias: u64,
        kernel: fn(u64) -> Option<&'static str>,
        kernel_base: u64,
    ) -> Self {
        let mut program: Vec<(u64, u64, String)> = program
            .into_iter()
            .map(|(a, size, name)| (a.wrapping_add(bias), a.wrapping_add(bias).saturating_add(size), name))
            .collect();
        program.sort_by_key(|f| f.0);
        Symbols { program, kernel, kernel_base }
    }

    /// The function that holds `addr`, or `[kernel]` / `[unknown]`.
    pub fn name(&self, addr: u64) -> &str {
        if addr >= self.kernel_base {
            return (self.kernel)(addr).unwrap_or("[kernel]");
        }
        let i = self.program.partition_point(|f| f.0 <= addr);
        match i.checked_sub(1).map(|i| &self.program[i]) {
            Some((_, end, name)) if addr < *end => name,
            _ => "[unknown]",
        }
    }

    /// The name of frame `i` of a stack: return addresses (every frame but the
    /// sampled instruction) point after their call, so the byte before is looked up.
    fn frame(&self, i: usize, addr: u64) -> &str {
        self.name(if i == 0 { addr } else { addr.wrapping_sub(1) })
    }
}

/// Folded stacks (`root;...;leaf count`, one line per distinct stack, as
/// `inferno` and Brendan Gregg's tools read them), sorted; the vCPU is the root.
pub fn folded(samples: &Samples, symbols: &Symbols) -> Vec<String> {
    let mut merged: HashMap<String, u64> = HashMap::new();
    for ((cpu, stack), n) in &samples.counts {
        let mut line = format!("vcpu{cpu}");
        for (i, addr) in stack.iter().enumerate().rev() {
            line.push(';');
            // `;` separates frames and a trailing number is the count: keep both
            // out of names.
            line.extend(symbols.frame(i, *addr).chars().map(|c| if c == ';' || c == ' ' { '_' } else { c }));
        }
        *merged.entry(line).or_insert(0) += n;
    }
    let mut lines: Vec<String> = merged.into_iter().map(|(l, n)| format!("{l} {n}")).collect();
    lines.sort();
    lines
}

/// The hottest `n` functions: samples in the function itself ("self") and with it
/// anywhere on the stack ("total"), as a text table.
pub fn top(samples: &Samples, symbols: &Symbols, n: usize) -> String {
    let mut own: HashMap<&str, u64> = HashMap::new();
    let mut total: HashMap<&str, u64> = HashMap::new();
    for ((_, stack), count) in &samples.counts {
        let names: Vec<&str> = stack.iter().enumerate().map(|(i, a)| symbols.frame(i, *a)).collect();
        if let Some(leaf) = names.first() {
            *own.entry(leaf).or_insert(0) += count;
        }
        let mut seen: Vec<&str> = Vec::with_capacity(names.len());
        for name in names {
            if !seen.contains(&name) {
                seen.push(name);
                *total.entry(name).or_insert(0) += count;
            }
        }
    }
    let mut rows: Vec<(&str, u64)> = own.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let all = samples.total.max(1) as f64;
    let in_kernel: u64 = samples
        .counts
        .iter()
        .filter(|((_, stack), _)| stack.first().is_some_and(|a| *a >= symbols.kernel_base))
        .map(|(_, n)| n)
        .sum();
    let mut out = format!(
        "in the kernel {:.1}%, in the program {:.1}%\n{:>7} {:>7}  function\n",
        in_kernel as f64 * 100.0 / all,
        (samples.total - in_kernel) as f64 * 100.0 / all,
        "self%",
        "total%"
    );
    for (name, count) in rows.into_iter().take(n) {
        let t = total.get(name).copied().unwrap_or(count);
        let _ = writeln!(out, "{:>6.2}% {:>6.2}%  {name}", count as f64 * 100.0 / all, t as f64 * 100.0 / all);
    }
    out
}

/// An SVG flame graph of `folded` lines, drawn by `inferno`.
pub fn flame_graph(folded: &[String], title: &str) -> Result<Vec<u8>, String> {
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, folded.iter().map(String::as_str), &mut svg)
        .map_err(|e| format!("cannot draw the flame graph: {e}"))?;
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(addr: u64) -> Option<&'static str> {
        (0xffff_8000_0000_1000..0xffff_8000_0000_2000).contains(&addr).then_some("onering_kernel::fs::write")
    }

    fn symbols() -> Symbols {
        let prog = vec![(0x1000, 0x100, "main".to_string()), (0x1100, 0x80, "hot loop".to_string())];
        Symbols::new(prog, 0x10_0000, kernel, 0xffff_8000_0000_0000)
    }

    #[test]
    fn addresses_are_named_from_both_tables() {
        let s = symbols();
        assert_eq!(s.name(0x10_1000), "main");
        assert_eq!(s.name(0x10_117f), "hot loop");
        assert_eq!(s.name(0x10_1180), "[unknown]");
        assert_eq!(s.name(0x1000), "[unknown]");
        assert_eq!(s.name(0xffff_8000_0000_1234), "onering_kernel::fs::write");
        assert_eq!(s.name(0xffff_8000_0000_3000), "[kernel]");
    }

    #[test]
    fn stacks_fold_root_first_and_return_addresses_name_the_call() {
        let s = symbols();
        let mut samples = Samples::default();
        // The kernel's write, called from the end of main (a return address one past
        // main's last byte still names main).
        samples.add(0, vec![0xffff_8000_0000_1010, 0x10_1100], 1);
        samples.add(0, vec![0xffff_8000_0000_1010, 0x10_1100], 1);
        samples.add(1, vec![0x10_1110, 0x10_1004], 1);
        let f = folded(&samples, &s);
        assert_eq!(f, ["vcpu0;main;onering_kernel::fs::write 2", "vcpu1;main;hot_loop 1"]);
        let t = top(&samples, &s, 5);
        let lines: Vec<&str> = t.lines().skip(1).collect();
        assert!(t.starts_with("in the kernel 66.7%, in the program 33.3%"), "{t}");
        assert!(lines[1].contains("66.67%") && lines[1].ends_with("onering_kernel::fs::write"), "{t}");
        assert!(lines[2].contains("33.33%") && lines[2].ends_with("hot loop"), "{t}");
        assert_eq!(lines.len(), 3);
        assert_eq!(samples.total(), 3);
        // A stack read once counts for the periods it covers: one tick's for four
        // periods of a 1 kHz timer on a 250 Hz host.
        samples.add(1, vec![0x10_1110, 0x10_1004], 4);
        assert_eq!((samples.total(), samples.stacks()), (7, 4));
        assert_eq!(folded(&samples, &s)[1], "vcpu1;main;hot_loop 5");
    }

    #[test]
    fn the_flame_graph_is_svg() {
        let svg = flame_graph(&["vcpu0;main;work 3".to_string(), "vcpu0;main 1".to_string()], "t").unwrap();
        let text = String::from_utf8(svg).unwrap();
        assert!(text.starts_with("<?xml") && text.contains("<svg") && text.contains("work"), "{text}");
    }
}
