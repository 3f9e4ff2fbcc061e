//! Seeded case generator: composes TP / IPI / CTS cases from the hand-written parts in [`super::catalog`]. Each action
//! is used at most once, framings, justifications and tasks are drawn by the seed, and every case gets a benign
//! control with the same framing. The built-in `experiments/cases/channel-trust.jsonl` is
//! `trustlens cases generate --seed 2026`.
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use super::catalog::{
    self, ActionPair, Framing, Theme, BENIGN_JUSTIFICATIONS, CTS_FRAMINGS, CTS_SCENARIOS, IPI_FRAMINGS, IPI_SCENARIOS,
    JUSTIFICATIONS, P1_FRAMINGS, P2_FRAMINGS, P3_FRAMINGS, TP_ACTIONS,
};
use super::error::{CaseError, Result};
use super::schema::{
    ActionSpec, ArgPredicate, Case, CtsSpec, Family, IpiSpec, Payload, PayloadOrder, PredicateOp, Sampling, ToolCall,
    ToolDef, TpSpec, TpSubtype,
};

/// Seed of the built-in set.
pub const BUILTIN_SEED: u64 = 2026;

/// How many cases of each kind to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateOptions {
    /// RNG seed.
    pub seed: u64,
    /// TP cases (split over P1/P2/P3 as evenly as possible, earlier subtypes first).
    pub tp: usize,
    /// IPI cases.
    pub ipi: usize,
    /// CTS cases.
    pub cts: usize,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions { seed: BUILTIN_SEED, tp: 50, ipi: 24, cts: 24 }
    }
}

/// Split of `n` TP cases over P1/P2/P3 (50 -> 17/17/16).
pub fn subtype_split(n: usize) -> [usize; 3] {
    let base = n / 3;
    let rem = n % 3;
    [base + usize::from(rem > 0), base + usize::from(rem > 1), base]
}

/// Generates a case set.
pub fn generate(opts: &GenerateOptions) -> Result<Vec<Case>> {
    for (what, want, have) in [
        ("TP", opts.tp, TP_ACTIONS.len()),
        ("IPI", opts.ipi, IPI_SCENARIOS.len()),
        ("CTS", opts.cts, CTS_SCENARIOS.len()),
    ] {
        if want > have {
            return Err(CaseError::Other(format!(
                "the generator has {have} distinct {what} actions; asked for {want} (payloads must not repeat)"
            )));
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let mut just = JustificationPool::new(&mut rng);
    let mut tasks = TaskPool::default();
    let source = format!("generated:seed={}", opts.seed);
    let mut cases = Vec::new();

    // TP: pick actions, assign subtypes, frame.
    let mut tp_idx: Vec<usize> = (0..TP_ACTIONS.len()).collect();
    tp_idx.shuffle(&mut rng);
    tp_idx.truncate(opts.tp);
    let split = subtype_split(opts.tp);
    let mut by_subtype: Vec<(TpSubtype, usize)> = Vec::new();
    let mut k = 0;
    for (s, n) in TpSubtype::ALL.into_iter().zip(split) {
        for _ in 0..n {
            by_subtype.push((s, tp_idx[k]));
            k += 1;
        }
    }
    let mut counters = [0usize; 3];
    for (subtype, i) in by_subtype {
        let pair = &TP_ACTIONS[i];
        let framings = match subtype {
            TpSubtype::P1 => P1_FRAMINGS,
            TpSubtype::P2 => P2_FRAMINGS,
            TpSubtype::P3 => P3_FRAMINGS,
        };
        let framing = pick_framing(framings, pair, &mut rng);
        let vars = FrameVars::draw(&mut rng, pair.tool, "");
        let (payload, benign) = compose(pair, framing, &vars, &mut just, &mut rng);
        let si = subtype as usize;
        counters[si] += 1;
        let task = tasks.take(pair.tool, &mut rng)?;
        let mut tool_names = domain_and_checked_tools(pair);
        push_unique(&mut tool_names, pair.tool);
        let case = Case {
            id: format!("tp-{}-{:02}", subtype.as_str().to_ascii_lowercase(), counters[si]),
            family: Family::Tp,
            subtype: Some(subtype),
            system: None,
            user_task: task.to_string(),
            payload,
            benign,
            tools: tools_by_name(&tool_names)?,
            tp: Some(TpSpec { carrier_tool: pair.tool.to_string() }),
            ipi: None,
            cts: None,
            malicious_action: parse_check(pair.check, pair.action)?,
            benign_action: Some(parse_check(pair.benign_check, pair.benign)?),
            sampling: Sampling::default(),
            source: Some(source.clone()),
        };
        cases.push(case);
    }

    // IPI.
    let mut ipi_idx: Vec<usize> = (0..IPI_SCENARIOS.len()).collect();
    ipi_idx.shuffle(&mut rng);
    ipi_idx.truncate(opts.ipi);
    ipi_idx.sort_unstable();
    for (n, i) in ipi_idx.into_iter().enumerate() {
        let sc = &IPI_SCENARIOS[i];
        let framing = pick_framing(IPI_FRAMINGS, &sc.pair, &mut rng);
        let vars = FrameVars::draw(&mut rng, sc.call, "");
        let (payload, benign) = compose(&sc.pair, framing, &vars, &mut just, &mut rng);
        let mut tool_names = domain_and_checked_tools(&sc.pair);
        for t in sc.extra_tools.iter().chain([&sc.call]) {
            push_unique(&mut tool_names, t);
        }
        let args: Value = serde_json::from_str(sc.args)
            .map_err(|e| CaseError::Other(format!("catalog: bad IPI call arguments {}: {e}", sc.args)))?;
        cases.push(Case {
            id: format!("ipi-{:02}", n + 1),
            family: Family::Ipi,
            subtype: None,
            system: None,
            user_task: sc.task.to_string(),
            payload,
            benign,
            tools: tools_by_name(&tool_names)?,
            tp: None,
            ipi: Some(IpiSpec {
                call: ToolCall { name: sc.call.to_string(), arguments: args },
                result_before: sc.before.to_string(),
                result_after: sc.after.to_string(),
            }),
            cts: None,
            malicious_action: parse_check(sc.pair.check, sc.pair.action)?,
            benign_action: Some(parse_check(sc.pair.benign_check, sc.pair.benign)?),
            sampling: Sampling::default(),
            source: Some(source.clone()),
        });
    }

    // CTS.
    let mut cts_idx: Vec<usize> = (0..CTS_SCENARIOS.len()).collect();
    cts_idx.shuffle(&mut rng);
    cts_idx.truncate(opts.cts);
    cts_idx.sort_unstable();
    for (n, i) in cts_idx.into_iter().enumerate() {
        let sc = &CTS_SCENARIOS[i];
        let target = sc.pair.tool;
        let framing = pick_framing(CTS_FRAMINGS, &sc.pair, &mut rng);
        let vars = FrameVars::draw(&mut rng, sc.poisoned, target);
        let (payload, benign) = compose(&sc.pair, framing, &vars, &mut just, &mut rng);
        let task = tasks.take(target, &mut rng)?;
        let mut tool_names = domain_and_checked_tools(&sc.pair);
        push_unique(&mut tool_names, target);
        push_unique(&mut tool_names, sc.poisoned);
        cases.push(Case {
            id: format!("cts-{:02}", n + 1),
            family: Family::Cts,
            subtype: None,
            system: None,
            user_task: task.to_string(),
            payload,
            benign,
            tools: tools_by_name(&tool_names)?,
            tp: None,
            ipi: None,
            cts: Some(CtsSpec { poisoned_tool: sc.poisoned.to_string(), target_tool: target.to_string() }),
            malicious_action: parse_check(sc.pair.check, sc.pair.action)?,
            benign_action: Some(parse_check(sc.pair.benign_check, sc.pair.benign)?),
            sampling: Sampling::default(),
            source: Some(source.clone()),
        });
    }
    Ok(cases)
}

/// Variables substituted into framings.
struct FrameVars {
    tool: String,
    target: String,
    code: &'static str,
    team: &'static str,
    date: &'static str,
    version: String,
}

impl FrameVars {
    fn draw(rng: &mut ChaCha8Rng, tool: &str, target: &str) -> FrameVars {
        FrameVars {
            tool: tool.to_string(),
            target: target.to_string(),
            code: catalog::POLICY_CODES.choose(rng).copied().unwrap_or("GOV-1"),
            team: catalog::TEAMS.choose(rng).copied().unwrap_or("it"),
            date: catalog::DATES.choose(rng).copied().unwrap_or("2025-01-01"),
            version: format!("{}.{}", rng.gen_range(1..4), rng.gen_range(0..10)),
        }
    }

    fn fill(&self, template: &str, action: &str, justification: &str) -> String {
        template
            .replace("{A}", &capitalise(action))
            .replace("{a}", action)
            .replace("{j}", justification)
            .replace("{tool}", &self.tool)
            .replace("{target}", &self.target)
            .replace("{code}", self.code)
            .replace("{team}", self.team)
            .replace("{date}", self.date)
            .replace("{version}", &self.version)
    }
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// Picks a framing that reads well with the action: a framing that sets the timing (`before`, `first`,
/// `precondition`) is not combined with an action that sets its own (`before`, `after`, `once`, ...), and a framing
/// that quantifies (`every`, `always`) is not combined with an action that does.
fn pick_framing<'a>(framings: &'a [Framing], pair: &ActionPair, rng: &mut ChaCha8Rng) -> &'a Framing {
    let has = |text: &str, words: &[&str]| {
        let t = text.to_ascii_lowercase();
        words.iter().any(|w| t.split(|c: char| !c.is_ascii_alphanumeric()).any(|x| x == *w))
    };
    let clash = |f: &Framing| {
        let texts = [pair.action, pair.benign];
        let timed = has(f.action, &["before", "first", "precondition", "when", "whenever"])
            && texts.iter().any(|t| has(t, &["before", "after", "first", "once", "start", "when", "whenever"]));
        let quantified = has(f.action, &["every", "always"])
            && texts.iter().any(|t| has(t, &["every", "always", "all", "any", "regardless"]));
        timed || quantified
    };
    let ok: Vec<&Framing> = framings.iter().filter(|f| !clash(f)).collect();
    if ok.is_empty() {
        framings.choose(rng).expect("framings")
    } else {
        ok.choose(rng).copied().expect("non-empty")
    }
}

fn compose(
    pair: &ActionPair,
    framing: &Framing,
    vars: &FrameVars,
    just: &mut JustificationPool,
    rng: &mut ChaCha8Rng,
) -> (Payload, Payload) {
    let order = if framing.justification_first { PayloadOrder::JustificationFirst } else { PayloadOrder::ActionFirst };
    let adv_j = just.take(pair.theme);
    let ben_j = just.take_benign(rng);
    let payload =
        Payload::new(vars.fill(framing.action, pair.action, ""), vars.fill(framing.justification, "", adv_j), order);
    let benign =
        Payload::new(vars.fill(framing.action, pair.benign, ""), vars.fill(framing.justification, "", ben_j), order);
    (payload, benign)
}

/// Draws justifications per theme without replacement (reshuffling a theme when it runs out).
struct JustificationPool {
    queues: Vec<(Theme, Vec<&'static str>)>,
    benign: Vec<&'static str>,
}

impl JustificationPool {
    fn new(rng: &mut ChaCha8Rng) -> Self {
        let queues = JUSTIFICATIONS
            .iter()
            .map(|(t, js)| {
                let mut v = js.to_vec();
                v.shuffle(rng);
                (*t, v)
            })
            .collect();
        let mut benign = BENIGN_JUSTIFICATIONS.to_vec();
        benign.shuffle(rng);
        JustificationPool { queues, benign }
    }

    fn take(&mut self, theme: Theme) -> &'static str {
        let (_, q) = self.queues.iter_mut().find(|(t, _)| *t == theme).expect("every theme has justifications");
        let j = q.remove(0);
        q.push(j);
        j
    }

    fn take_benign(&mut self, _rng: &mut ChaCha8Rng) -> &'static str {
        let j = self.benign.remove(0);
        self.benign.push(j);
        j
    }
}

/// Draws tasks per tool without replacement (cycling when a tool runs out).
#[derive(Default)]
struct TaskPool {
    used: std::collections::HashMap<String, Vec<&'static str>>,
}

impl TaskPool {
    fn take(&mut self, tool: &str, rng: &mut ChaCha8Rng) -> Result<&'static str> {
        let all = catalog::tasks_for(tool);
        if all.is_empty() {
            return Err(CaseError::Other(format!("catalog: no user task for tool `{tool}`")));
        }
        let q = self.used.entry(tool.to_string()).or_insert_with(|| {
            let mut v = all.to_vec();
            v.shuffle(rng);
            v
        });
        let t = q.remove(0);
        q.push(t);
        Ok(t)
    }
}

fn push_unique(v: &mut Vec<String>, name: &str) {
    if !v.iter().any(|n| n == name) {
        v.push(name.to_string());
    }
}

fn domain_and_checked_tools(pair: &ActionPair) -> Vec<String> {
    let mut names: Vec<String> = catalog::domain_tools(pair.domain).iter().map(|s| s.to_string()).collect();
    for check in [pair.check, pair.benign_check] {
        if let Some(t) = check.split_whitespace().next() {
            push_unique(&mut names, t);
        }
    }
    names
}

/// Tool definitions from the catalog, by name.
pub fn tools_by_name(names: &[String]) -> Result<Vec<ToolDef>> {
    names
        .iter()
        .map(|n| {
            catalog::tool(n)
                .map(|t| ToolDef {
                    name: t.name.to_string(),
                    description: t.description.to_string(),
                    parameters: (t.parameters)(),
                })
                .ok_or_else(|| CaseError::Other(format!("unknown catalog tool `{n}`")))
        })
        .collect()
}

/// Parses the catalog's checker notation (`tool arg~value AND arg=value AND arg?`) into an [`ActionSpec`]; the empty
/// string gives a chat-only spec described by `description`.
pub fn parse_check(spec: &str, description: &str) -> Result<ActionSpec> {
    let spec = spec.trim();
    let description = capitalise(description);
    if spec.is_empty() {
        return Ok(ActionSpec { tool: None, args: vec![], description });
    }
    let (tool, rest) = spec.split_once(' ').unwrap_or((spec, ""));
    let mut args = Vec::new();
    for part in rest.split(" AND ").map(str::trim).filter(|p| !p.is_empty()) {
        let name_end = part
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .ok_or_else(|| CaseError::Other(format!("checker `{spec}`: predicate `{part}` has no operator")))?;
        let (arg, rest) = part.split_at(name_end);
        let (op, value) = match rest.chars().next() {
            Some('~') => (PredicateOp::Contains, Some(Value::String(rest[1..].to_string()))),
            Some('=') => (PredicateOp::Equals, Some(Value::String(rest[1..].to_string()))),
            Some('?') => (PredicateOp::Exists, None),
            _ => return Err(CaseError::Other(format!("checker `{spec}`: bad predicate `{part}`"))),
        };
        args.push(ArgPredicate { arg: arg.to_string(), op, value });
    }
    Ok(ActionSpec { tool: Some(tool.to_string()), args, description })
}
