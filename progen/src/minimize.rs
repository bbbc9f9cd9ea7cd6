//! The minimizer: shrinks a failing program (chains, lines, declaration attributes, iteration
//! counts, target knobs) while it still fails.

fn first_word(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or("")
}

fn is_decl(line: &str) -> bool {
    matches!(first_word(line), "matrix" | "vector" | "input" | "output")
}

/// An `input`, or an `output` collected from netq (no `at`).
fn is_netq_decl(line: &str) -> bool {
    let w = first_word(line);
    w == "input" || (w == "output" && !line.contains(" at "))
}

/// A chain instruction (anything but declarations, directives, `s_wr` and comments).
fn is_instr(line: &str) -> bool {
    let w = first_word(line);
    !(w.is_empty()
        || w.starts_with("//")
        || is_decl(line)
        || matches!(w, "quant" | "let" | "target" | "s_wr" | "repeat" | "}"))
}

/// Line ranges `(first, last)` of the chains: runs of instructions ending at `end_chain`, the
/// `s_wr iterations` right before a chain counted with it.
fn chain_blocks(lines: &[String]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, l) in lines.iter().enumerate() {
        if is_instr(l) {
            let s = *start.get_or_insert(i);
            if first_word(l) == "end_chain" {
                let s = if s > 0 && lines[s - 1].trim_start().starts_with("s_wr iterations") {
                    s - 1
                } else {
                    s
                };
                out.push((s, i));
                start = None;
            }
        } else {
            start = None;
        }
    }
    out
}

pub(super) fn join(lines: &[String]) -> String {
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// Smaller variants of one line: declaration attributes dropped, leading shape dimensions and
/// `s_wr iterations` values lowered.
fn line_variants(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    if is_decl(line) {
        for attr in [" pad ", " quant ", " = 0"] {
            if let Some(p) = line.find(attr) {
                // An attribute runs to the next attribute keyword or the end of the line.
                let rest = &line[p + attr.len()..];
                let end = [" pad ", " quant ", " = 0"]
                    .iter()
                    .filter_map(|a| rest.find(a))
                    .min()
                    .map_or(line.len(), |e| p + attr.len() + e);
                out.push(format!("{}{}", &line[..p], &line[end..]));
            }
        }
        // `[a, b, C]` -> leading dimensions lowered to 1.
        if let (Some(l), Some(r)) = (line.find('['), line.find(']'))
            && l < r
        {
            let dims: Vec<&str> = line[l + 1..r].split(',').map(str::trim).collect();
            for i in 0..dims.len().saturating_sub(1) {
                if dims[i] != "1" {
                    let mut d = dims.clone();
                    d[i] = "1";
                    out.push(format!(
                        "{}[{}]{}",
                        &line[..l],
                        d.join(", "),
                        &line[r + 1..]
                    ));
                }
            }
        }
    } else if let Some(k) = line.trim().strip_prefix("s_wr iterations,")
        && k.trim() != "1"
    {
        out.push("s_wr iterations, 1".into());
    }
    out
}

/// Shrink a failing program: repeatedly delete chains (alone, or with one netq declaration),
/// single lines, declaration attributes, and lower iteration counts and leading dimensions, then
/// drop target knobs, keeping each change only while `still_fails(source, target_toml)` holds.
/// `still_fails` must return false for programs the checker rejects (it is the judge of
/// validity). Returns the smallest program and target found.
pub fn minimize(
    source: &str,
    target_toml: &str,
    mut still_fails: impl FnMut(&str, &str) -> bool,
) -> (String, String) {
    let mut lines: Vec<String> = source.lines().map(str::to_string).collect();
    let mut target: Vec<String> = target_toml.lines().map(str::to_string).collect();
    loop {
        let mut progress = false;
        let mut try_lines = |cand: Vec<String>, lines: &mut Vec<String>, target: &[String]| {
            if still_fails(&join(&cand), &join(target)) {
                *lines = cand;
                true
            } else {
                false
            }
        };
        // Whole chains, from the last one back (later chains depend on earlier ones).
        let blocks = chain_blocks(&lines);
        for &(s, e) in blocks.iter().rev() {
            let mut cand = lines.clone();
            cand.drain(s..=e);
            if try_lines(cand.clone(), &mut lines, &target) {
                progress = true;
                break;
            }
            // The chain popped or pushed a netq row group: drop its declaration too.
            let netq: Vec<usize> = (0..cand.len())
                .filter(|&i| is_netq_decl(&cand[i]))
                .collect();
            let mut done = false;
            for &j in netq.iter().rev() {
                let mut c2 = cand.clone();
                c2.remove(j);
                if try_lines(c2, &mut lines, &target) {
                    done = true;
                    break;
                }
            }
            if done {
                progress = true;
                break;
            }
        }
        if progress {
            continue;
        }
        // Single lines and line variants.
        let mut i = lines.len();
        while i > 0 {
            i -= 1;
            if i >= lines.len() || first_word(&lines[i]) == "end_chain" {
                continue;
            }
            let mut cand = lines.clone();
            cand.remove(i);
            if try_lines(cand, &mut lines, &target) {
                progress = true;
                continue;
            }
            for v in line_variants(&lines[i]) {
                let mut cand = lines.clone();
                cand[i] = v;
                if try_lines(cand, &mut lines, &target) {
                    progress = true;
                    break;
                }
            }
        }
        // Fewer iterations together with a smaller netq row group.
        let iters: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].trim_start().starts_with("s_wr iterations"))
            .collect();
        for &i in &iters {
            let netq: Vec<usize> = (0..lines.len())
                .filter(|&j| is_netq_decl(&lines[j]))
                .collect();
            for j in netq {
                for v in line_variants(&lines[j]) {
                    let mut cand = lines.clone();
                    cand[i] = "s_wr iterations, 1".into();
                    cand[j] = v;
                    if try_lines(cand, &mut lines, &target) {
                        progress = true;
                    }
                }
            }
        }
        // Target knobs back to their defaults.
        let mut k = target.len();
        while k > 0 {
            k -= 1;
            let key = first_word(&target[k]);
            if matches!(
                key,
                "mvm_vector" | "mvm_matrix" | "mvm_output" | "mfu_input"
            ) {
                let mut cand = target.clone();
                cand.remove(k);
                if still_fails(&join(&lines), &join(&cand)) {
                    target = cand;
                    progress = true;
                }
            }
        }
        if !progress {
            break;
        }
    }
    (join(&lines), join(&target))
}
