//! What `tailtrim model` computes and prints: its subcommands' flags, the parameters they
//! give the analytic models and the whole text (tables or JSON) each prints.
//!
//! ```text
//!   ModelCommand::Cheng  ──cheng_params──> tailtrim_model::cheng::predict | cheng_sweep
//!                                          ──> cheng_table | sweep_table (+ plot_sweep) | JSON
//!   ModelCommand::Chisel ──chisel_params──> ChiselReport::evaluate ──> chisel_table | JSON
//!   ModelCommand::Cliff  ──> tailtrim_model::cliff::cliff_table ──> cliff_table | JSON
//!   ModelCommand::Plan   ──profile (stats | bench JSON | flags)──> tailtrim_model::plan::plan
//!                        (--ring: each count's ketama ring ──> plan::plan_with_split)
//!                                          ──> model_plan::plan_table | JSON
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tailtrim_model::cheng::{self, ChengParams};
use tailtrim_model::chisel::{ChiselParams, LinearCost, Objective, PlanGrid};
use tailtrim_model::cliff::{self, DEFAULT_KNEE_SLOPE, DEFAULT_LEVEL_DELTA, PAPER_TABLE_4};
use tailtrim_model::evaluate::{cheng_sweep, ChiselReport};
use tailtrim_model::plan::{plan, plan_with_split, Plan, PlanRequest, DEFAULT_MAX_SERVERS};
use tailtrim_model::tier::{predict, ServiceCost, TierPrediction, TierShape, WorkloadProfile};
use tailtrim_model::Seconds;

use crate::report::model::{
    cheng_table, chisel_table, cliff_table, plot_sweep, sweep_table, ChiselInputs,
};
use crate::report::model_plan::{
    plan_table, profile_from_bench, profile_from_stats, MeasuredProfile, RingSplit,
    RING_DEFAULT_FIRST_SERVER, RING_DEFAULT_HASH,
};

/// The subcommands of `tailtrim model`.
#[derive(clap::Subcommand, Debug)]
pub enum ModelCommand {
    /// Cheng et al. Theorem 1: network, memcached (GI^X/M/1) and database latency of an N-key request.
    Cheng(Box<ChengArgs>),
    /// Chisel's layered model: mice/elephant latency for merge level B and chunk size L, and the best (B, L).
    Chisel(Box<ChiselArgs>),
    /// The latency-cliff utilization per burst degree ξ, next to the paper's Table 4.
    Cliff(CliffArgs),
    /// How many servers / threads for p99 <= X at rate R, from a running tier's stats or a bench JSON.
    Plan(Box<PlanArgs>),
}

/// Flags of `tailtrim model plan`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  tailtrim model plan --from-stats 127.0.0.1:11211 --slo-p99 2000 --rate 50000\n  tailtrim model plan --from-bench run.json --service-us 120 --slo-p99 1500 --threads 1,2,4,8 --json\n  tailtrim model plan --rate 20000 --keys 10 --service-us 50 --slo-p99 1000"
)]
pub struct PlanArgs {
    /// Take the profile from a running server's or proxy's `stats` (two readings --sample-secs apart).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "from_bench")]
    pub from_stats: Option<String>,
    /// Take the profile from a `tailtrim bench --json` file (one run).
    #[arg(long, value_name = "FILE.json")]
    pub from_bench: Option<PathBuf>,
    /// Seconds between the two `stats` readings.
    #[arg(long, default_value_t = 2.0)]
    pub sample_secs: f64,
    /// The objective: request p99 at most this many µs.
    #[arg(long, value_name = "US")]
    pub slo_p99: f64,
    /// Plan for this many requests/s over the tier (default: the measured rate).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Mean keys per request (default: measured, else 1).
    #[arg(long)]
    pub keys: Option<f64>,
    /// Service time of one request at one worker thread, µs (default: measured).
    #[arg(long, value_name = "US")]
    pub service_us: Option<f64>,
    /// Service time per key of a request, µs (default: measured, else 0).
    #[arg(long, value_name = "US")]
    pub per_key_us: Option<f64>,
    /// Threads per server to consider, comma separated (default: the source's, else 4).
    #[arg(long, value_name = "LIST")]
    pub threads: Option<String>,
    /// ξ: burst degree of the arrivals (0 = Poisson), in [0, 1).
    #[arg(long, default_value_t = 0.0)]
    pub xi: f64,
    /// Constant latency added to every request (network, proxy), µs.
    #[arg(long, default_value_t = 0.0)]
    pub network_us: f64,
    /// Client connections the requests arrive over, each read in order (e.g. a proxy's
    /// clients); 0: every request finds its connection free.
    #[arg(long, default_value_t = 0)]
    pub client_connections: u32,
    /// The most loaded server's share of the keys over the mean share (>= 1; 1: balanced).
    #[arg(long, default_value_t = 1.0)]
    pub imbalance: f64,
    /// Take each server count's imbalance from the ketama ring the proxy builds over that
    /// many servers, named as a tier names them by default (127.0.0.1:11211, :11212, …).
    #[arg(long, conflicts_with = "imbalance")]
    pub ring: bool,
    /// The ring's servers in pool order, comma separated, each `host:port[:weight] [name]`;
    /// counts past the list go on at the last one's host and the following ports. Implies --ring.
    #[arg(long, value_name = "LIST", conflicts_with = "imbalance")]
    pub ring_servers: Option<String>,
    /// The ring's key hash (the pool's `hash`).
    #[arg(long, value_name = "NAME", default_value = RING_DEFAULT_HASH)]
    pub ring_hash: String,
    /// Largest server count searched.
    #[arg(long, default_value_t = DEFAULT_MAX_SERVERS)]
    pub max_servers: u32,
    /// Also predict this tier: N servers of the first --threads count (e.g. the one running now).
    #[arg(long, value_name = "N")]
    pub servers: Option<u32>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `tailtrim model cheng` (defaults: the paper's validation point, Section 5.1).
#[derive(clap::Args, Debug)]
pub struct ChengArgs {
    /// λ: key arrival rate at the most loaded server, keys/s.
    #[arg(long, default_value_t = 62_500.0)]
    pub lambda: f64,
    /// Λ: total key rate over all servers, keys/s (sets λ = p1·Λ; overrides --lambda).
    #[arg(long)]
    pub total_rate: Option<f64>,
    /// ξ: burst degree of the generalized-Pareto inter-arrival gaps (0 = Poisson), in [0, 1).
    #[arg(long, default_value_t = 0.15)]
    pub xi: f64,
    /// q: probability that keys arrive concurrently (geometric batches), in [0, 1).
    #[arg(long, default_value_t = 0.1)]
    pub q: f64,
    /// μ_S: service rate of one memcached server, keys/s.
    #[arg(long, default_value_t = 80_000.0)]
    pub mu_s: f64,
    /// N: keys per end-user request.
    #[arg(short = 'n', long, default_value_t = 150)]
    pub keys: u64,
    /// M: number of memcached servers.
    #[arg(long, default_value_t = 4)]
    pub servers: u32,
    /// p1: largest share of a request's keys on one server (default 1/M: balanced).
    #[arg(long)]
    p1: Option<f64>,
    /// r: cache miss ratio.
    #[arg(short = 'r', long, default_value_t = 0.01)]
    pub miss_ratio: f64,
    /// 1/μ_D: database service time per missed key, milliseconds.
    #[arg(long, default_value_t = 1.0)]
    pub db_ms: f64,
    /// T_N: network latency, microseconds (Table 3 uses 20).
    #[arg(long, default_value_t = 20.0)]
    pub network_us: f64,
    /// Sweep λ as `start:end:step` (keys/s) and print E[T_S(N)] bounds per point.
    #[arg(long, value_name = "A:B:STEP")]
    pub sweep_lambda: Option<String>,
    /// Burst degrees to sweep (comma separated; default: --xi only).
    #[arg(long, value_name = "LIST")]
    pub sweep_xi: Option<String>,
    /// Write the sweep as a plot, SVG (or PNG if the name ends in .png): E[T_S(N)] vs λ, like the paper's Fig. 7/8.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `tailtrim model chisel` (defaults: the paper's testbed profile).
#[derive(clap::Args, Debug)]
pub struct ChiselArgs {
    /// Mean inter-arrival time of user requests, µs (Poisson arrivals).
    #[arg(long, default_value_t = 200.0)]
    pub interarrival_us: f64,
    /// Mice per elephant in the mix (9 → 9:1).
    #[arg(long, default_value_t = 9.0)]
    pub mice_per_elephant: f64,
    /// Keys in a mouse request.
    #[arg(long, default_value_t = 10)]
    pub mouse_keys: u32,
    /// Keys in an elephant request.
    #[arg(long, default_value_t = 100)]
    pub elephant_keys: u32,
    /// Client query threads.
    #[arg(long, default_value_t = 16)]
    pub client_threads: u32,
    /// Memcached worker threads in the pool (servers × threads each).
    #[arg(long, default_value_t = 16)]
    pub server_threads: u32,
    /// P_S = a + b·K: constant part a, µs.
    #[arg(long, default_value_t = 3.3)]
    pub ps_a_us: f64,
    /// P_S = a + b·K: per-key part b, µs.
    #[arg(long, default_value_t = 0.6)]
    pub ps_b_us: f64,
    /// N_S = c + d·K: constant part c, µs.
    #[arg(long, default_value_t = 85.0)]
    pub ns_c_us: f64,
    /// N_S = c + d·K: per-key part d, µs.
    #[arg(long, default_value_t = 6.5)]
    pub ns_d_us: f64,
    /// Client overhead per query (setup, library), µs.
    #[arg(long, default_value_t = 0.0)]
    pub overhead_us: f64,
    /// Evaluate this merge level B (with --chunk).
    #[arg(long)]
    pub merge: Option<u32>,
    /// Evaluate this chunk size L (with --merge).
    #[arg(long)]
    pub chunk: Option<u32>,
    /// Largest merge level in the grid search.
    #[arg(long, default_value_t = 8)]
    pub max_merge: u32,
    /// Skip merge levels whose mean accumulation time exceeds the client overhead (Chisel's rule).
    #[arg(long)]
    pub merge_within_overhead: bool,
    /// What the grid search minimizes: mean or p95.
    #[arg(long, default_value = "mean", value_parser = ["mean", "p95"])]
    pub objective: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `tailtrim model cliff`.
#[derive(clap::Args, Debug)]
pub struct CliffArgs {
    /// κ: knee = first ρ where d ln E[T_S(N)]/dρ ≥ κ (default 1/(1−0.77), M/M/1's slope at 77%).
    #[arg(long, default_value_t = DEFAULT_KNEE_SLOPE)]
    pub knee_slope: f64,
    /// δ*: level = the ρ where δ(ξ, ρ) = δ* (latency at 1/(1−δ*) times its zero-load value).
    #[arg(long, default_value_t = DEFAULT_LEVEL_DELTA)]
    pub level_delta: f64,
    /// Burst degrees (comma separated; default: Table 4's 0, 0.05, …, 0.95).
    #[arg(long, value_name = "LIST")]
    pub xi: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Computes the subcommand's whole output (and writes its plot, if asked).
pub fn render(command: &ModelCommand) -> Result<String, String> {
    let mut out = String::new();
    match command {
        ModelCommand::Cheng(flags) => run_cheng(&mut out, flags),
        ModelCommand::Chisel(flags) => run_chisel(&mut out, flags),
        ModelCommand::Cliff(flags) => run_cliff(&mut out, flags),
        ModelCommand::Plan(flags) => run_plan(&mut out, flags),
    }?;
    Ok(out)
}

/// `value` as pretty JSON and a newline.
fn to_json<T: Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string_pretty(value)
        .map(|text| text + "\n")
        .map_err(|error| format!("json: {error}"))
}

fn parse_list(text: &str) -> Result<Vec<f64>, String> {
    text.split(',')
        .map(|item| {
            item.trim()
                .parse::<f64>()
                .map_err(|error| format!("bad number {item:?}: {error}"))
        })
        .collect()
}

fn parse_range(text: &str) -> Result<Vec<f64>, String> {
    let parts = parse_list(&text.replace(':', ","))?;
    let [start, end, step] = parts[..] else {
        return Err(format!("expected start:end:step, got {text:?}"));
    };
    if step.is_nan() || step <= 0.0 || end < start {
        return Err(format!(
            "bad range {text:?}: need step > 0 and end >= start"
        ));
    }
    let count = ((end - start) / step + 1e-9).floor() as usize;
    Ok((0..=count)
        .map(|index| start + step * index as f64)
        .collect())
}

// ---------------------------------------------------------------------------
// cheng
// ---------------------------------------------------------------------------

fn cheng_params(flags: &ChengArgs) -> ChengParams {
    let heaviest_share = flags.p1.unwrap_or(1.0 / f64::from(flags.servers.max(1)));
    ChengParams {
        key_rate: flags
            .total_rate
            .map_or(flags.lambda, |total| total * heaviest_share),
        burst_degree: flags.xi,
        concurrency: flags.q,
        service_rate: flags.mu_s,
        keys_per_request: flags.keys,
        servers: flags.servers,
        heaviest_share,
        miss_ratio: flags.miss_ratio,
        database_service_time: Seconds::from_millis(flags.db_ms),
        network_latency: Seconds::from_micros(flags.network_us),
    }
}

fn run_cheng(out: &mut String, flags: &ChengArgs) -> Result<(), String> {
    let params = cheng_params(flags);
    if let Some(range) = &flags.sweep_lambda {
        return run_cheng_sweep(out, flags, &params, range);
    }
    let prediction = cheng::predict(&params).map_err(|error| error.to_string())?;
    if flags.json {
        out.push_str(&to_json(&prediction)?);
    } else {
        out.push_str(&cheng_table(&prediction));
    }
    Ok(())
}

fn run_cheng_sweep(
    out: &mut String,
    flags: &ChengArgs,
    base: &ChengParams,
    range: &str,
) -> Result<(), String> {
    let lambdas = parse_range(range)?;
    let burst_degrees = match &flags.sweep_xi {
        Some(list) => parse_list(list)?,
        None => vec![base.burst_degree],
    };
    let points = cheng_sweep(base, &lambdas, &burst_degrees);
    if let Some(path) = &flags.plot {
        plot_sweep(path, &points, &burst_degrees, base)?;
    }
    if flags.json {
        out.push_str(&to_json(&points)?);
        return Ok(());
    }
    out.push_str(&sweep_table(&points, base, flags.plot.as_deref()));
    Ok(())
}

// ---------------------------------------------------------------------------
// chisel
// ---------------------------------------------------------------------------

fn chisel_params(flags: &ChiselArgs) -> Result<ChiselParams, String> {
    let valid = flags.interarrival_us.is_finite()
        && flags.interarrival_us > 0.0
        && flags.mice_per_elephant.is_finite()
        && flags.mice_per_elephant >= 0.0;
    if !valid {
        return Err("--interarrival-us must be > 0 and --mice-per-elephant >= 0".to_string());
    }
    Ok(ChiselParams {
        arrival_rate: 1e6 / flags.interarrival_us,
        elephant_fraction: 1.0 / (1.0 + flags.mice_per_elephant),
        mouse_keys: flags.mouse_keys,
        elephant_keys: flags.elephant_keys,
        client_threads: flags.client_threads,
        server_threads: flags.server_threads,
        processing: LinearCost {
            fixed: Seconds::from_micros(flags.ps_a_us),
            per_key: Seconds::from_micros(flags.ps_b_us),
        },
        network: LinearCost {
            fixed: Seconds::from_micros(flags.ns_c_us),
            per_key: Seconds::from_micros(flags.ns_d_us),
        },
        client_overhead: Seconds::from_micros(flags.overhead_us),
    })
}

fn run_chisel(out: &mut String, flags: &ChiselArgs) -> Result<(), String> {
    let params = chisel_params(flags)?;
    let objective = if flags.objective == "p95" {
        Objective::P95
    } else {
        Objective::Mean
    };
    let mut grid = PlanGrid::default_for(&params);
    grid.merge_levels = (1..=flags.max_merge.max(1)).collect();
    grid.objective = objective;
    if flags.merge_within_overhead {
        grid.max_merge_wait = Some(params.client_overhead);
    }
    let requested = match (flags.merge, flags.chunk) {
        (Some(merge), Some(chunk)) => Some((merge, chunk)),
        (None, None) => None,
        _ => return Err("--merge and --chunk go together".to_string()),
    };
    let report =
        ChiselReport::evaluate(params, &grid, requested).map_err(|error| error.to_string())?;
    if flags.json {
        out.push_str(&to_json(&report)?);
        return Ok(());
    }
    let inputs = ChiselInputs {
        interarrival_us: flags.interarrival_us,
        mice_per_elephant: flags.mice_per_elephant,
        ps_a_us: flags.ps_a_us,
        ps_b_us: flags.ps_b_us,
        ns_c_us: flags.ns_c_us,
        ns_d_us: flags.ns_d_us,
        overhead_us: flags.overhead_us,
        objective: &flags.objective,
    };
    out.push_str(&chisel_table(&report, &inputs));
    Ok(())
}

// ---------------------------------------------------------------------------
// cliff
// ---------------------------------------------------------------------------

fn run_cliff(out: &mut String, flags: &CliffArgs) -> Result<(), String> {
    let burst_degrees = match &flags.xi {
        Some(list) => parse_list(list)?,
        None => PAPER_TABLE_4.iter().map(|(xi, _)| *xi).collect(),
    };
    let rows = cliff::cliff_table(&burst_degrees, flags.knee_slope, flags.level_delta)
        .map_err(|error| error.to_string())?;
    if flags.json {
        out.push_str(&to_json(&rows)?);
        return Ok(());
    }
    out.push_str(&cliff_table(&rows, flags.knee_slope, flags.level_delta));
    Ok(())
}

// ---------------------------------------------------------------------------
// plan
// ---------------------------------------------------------------------------

fn measured_profile(flags: &PlanArgs) -> Result<MeasuredProfile, String> {
    if let Some(address) = &flags.from_stats {
        if !(flags.sample_secs.is_finite() && flags.sample_secs > 0.0 && flags.sample_secs <= 600.0)
        {
            return Err("--sample-secs must be in (0, 600]".to_string());
        }
        return Ok(profile_from_stats(
            address,
            Duration::from_secs_f64(flags.sample_secs),
        )?);
    }
    if let Some(path) = &flags.from_bench {
        return Ok(profile_from_bench(path)?);
    }
    Ok(MeasuredProfile {
        source: "flags".to_string(),
        ..MeasuredProfile::default()
    })
}

fn plan_request(flags: &PlanArgs, measured: &MeasuredProfile) -> Result<PlanRequest, String> {
    let request_rate = flags.rate.or(measured.request_rate).ok_or_else(|| {
        format!(
            "no request rate: {} saw no requests; give --rate",
            measured.source
        )
    })?;
    let service_us = flags.service_us.or(measured.service_us).ok_or_else(|| {
        format!(
            "no service time: {} does not give one; give --service-us",
            measured.source
        )
    })?;
    let thread_options = match &flags.threads {
        Some(list) => parse_list(list)?
            .into_iter()
            .map(|threads| {
                if threads >= 1.0 && threads.fract() == 0.0 && threads <= 4096.0 {
                    Ok(threads as u32)
                } else {
                    Err(format!("--threads: {threads} is not a thread count"))
                }
            })
            .collect::<Result<Vec<u32>, String>>()?,
        None => vec![measured.threads.unwrap_or(4)],
    };
    Ok(PlanRequest {
        profile: WorkloadProfile {
            request_rate,
            keys_per_request: flags.keys.or(measured.keys_per_request).unwrap_or(1.0),
            value_bytes: measured.value_bytes.unwrap_or(0.0),
            service: ServiceCost {
                fixed: Seconds::from_micros(service_us),
                per_key: Seconds::from_micros(
                    flags.per_key_us.or(measured.per_key_us).unwrap_or(0.0),
                ),
            },
            burst_degree: flags.xi,
            network: Seconds::from_micros(flags.network_us),
            client_connections: flags.client_connections,
            imbalance: flags.imbalance,
        },
        slo_p99: Seconds::from_micros(flags.slo_p99),
        thread_options,
        max_servers: flags.max_servers,
    })
}

/// What `model plan --json` prints.
#[derive(Serialize)]
struct PlanOutput<'a> {
    measured: &'a MeasuredProfile,
    /// The tier of `--servers`, predicted.
    current: Option<TierPrediction>,
    plan: &'a Plan,
    /// Planned on rings: the recommended count's servers, in pool order.
    ring_servers: Option<Vec<String>>,
}

/// The plan on each count's ring: the ring's imbalance in place of the profile's.
fn plan_on_rings(request: &PlanRequest, ring: &RingSplit) -> Result<Plan, String> {
    let mut failure = None;
    let mut imbalance_at = |servers: u32| {
        ring.imbalance(servers).unwrap_or_else(|error| {
            failure.get_or_insert(error);
            f64::NAN
        })
    };
    let planned = plan_with_split(request, &mut imbalance_at);
    if let Some(error) = failure {
        return Err(error);
    }
    planned.map_err(|error| error.to_string())
}

fn run_plan(out: &mut String, flags: &PlanArgs) -> Result<(), String> {
    let measured = measured_profile(flags)?;
    let request = plan_request(flags, &measured)?;
    let ring = match (&flags.ring_servers, flags.ring) {
        (Some(servers), _) => Some(RingSplit::parse(servers, &flags.ring_hash)?),
        (None, true) => Some(RingSplit::parse(
            RING_DEFAULT_FIRST_SERVER,
            &flags.ring_hash,
        )?),
        (None, false) => None,
    };
    let current = match flags.servers {
        Some(servers) => {
            let shape = TierShape {
                servers,
                threads: request.thread_options[0],
            };
            let profile = match &ring {
                Some(ring) => WorkloadProfile {
                    imbalance: ring.imbalance(servers)?,
                    ..request.profile
                },
                None => request.profile,
            };
            Some(predict(&profile, shape).map_err(|error| error.to_string())?)
        }
        None => None,
    };
    let plan = match &ring {
        Some(ring) => plan_on_rings(&request, ring)?,
        None => plan(&request).map_err(|error| error.to_string())?,
    };
    if flags.json {
        let ring_servers = match &ring {
            Some(ring) => Some(
                ring.servers(plan.recommended.servers)?
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            ),
            None => None,
        };
        out.push_str(&to_json(&PlanOutput {
            measured: &measured,
            current,
            plan: &plan,
            ring_servers,
        })?);
        return Ok(());
    }
    out.push_str(&plan_table(&plan, &measured, ring.as_ref()));
    if let Some(current) = current {
        out.push_str(&format!(
            "at {} servers x {} threads: ρ {:.3}, p50 {:.0} µs, p99 {:.0} µs\n",
            current.shape.servers,
            current.shape.threads,
            current.utilization,
            current.p50.as_micros(),
            current.p99.as_micros()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{parse_range, render, ModelCommand};

    /// An objective (µs) the even split meets at 3 testbed servers and the default ring does not.
    const RING_TEST_SLO_US: &str = "33930";

    #[derive(Parser)]
    struct TestCli {
        #[command(subcommand)]
        command: ModelCommand,
    }

    fn output(arguments: &[&str]) -> Result<String, String> {
        let cli =
            TestCli::try_parse_from(std::iter::once("model").chain(arguments.iter().copied()))
                .map_err(|error| error.to_string())?;
        render(&cli.command)
    }

    fn json(arguments: &[&str]) -> serde_json::Value {
        let text = output(arguments).unwrap_or_else(|error| panic!("{error}"));
        serde_json::from_str(&text).unwrap_or_else(|error| panic!("{error}: {text}"))
    }

    #[test]
    fn ranges_include_the_end_and_reject_nonsense() {
        assert_eq!(parse_range("10:20:5"), Ok(vec![10.0, 15.0, 20.0]));
        assert!(parse_range("20:10:5").is_err());
        assert!(parse_range("10:20:0").is_err());
        assert!(parse_range("10:20").is_err());
    }

    #[test]
    fn total_rate_and_p1_set_the_heaviest_server_rate() {
        let value = json(&["cheng", "--total-rate", "80000", "--p1", "0.5", "--json"]);
        assert_eq!(value["params"]["key_rate"], 40_000.0);
        assert_eq!(value["params"]["heaviest_share"], 0.5);
        assert_eq!(value["utilization"], 0.5);
        let lower = value["server"]["lower"].as_f64().unwrap_or(f64::NAN);
        let upper = value["server"]["upper"].as_f64().unwrap_or(f64::NAN);
        assert!(lower < upper, "{lower} {upper}");
    }

    #[test]
    fn default_table_shows_the_validation_point() {
        let table = output(&["cheng"]).unwrap_or_else(|error| panic!("{error}"));
        assert!(table.contains("E[T_S(N)] memcached"), "{table}");
        assert!(table.contains("ρ_S=0.7812"), "{table}");
        let saturated = output(&["cheng", "--lambda", "90000"]);
        assert!(saturated.is_err_and(|error| error.contains("unstable")));
    }

    #[test]
    fn cliff_and_chisel_flags() {
        let rows = json(&["cliff", "--xi", "0,0.5", "--json"]);
        assert_eq!(rows.as_array().map(Vec::len), Some(2));
        assert!(output(&["chisel", "--merge", "2"]).is_err());
        let report = json(&["chisel", "--merge", "2", "--chunk", "25", "--json"]);
        assert_eq!(report["requested"]["chunks"], 4);
        assert_eq!(report["batching"]["chunks"], 1);
    }

    /// `model plan` for the model-loop testbed (720 requests/s of 4-key gets, 2.5 ms of a
    /// thread per key, the bench's 64 connections read in order by the proxy).
    fn testbed_plan(extra: &[&str]) -> Result<String, String> {
        let mut arguments = vec![
            "plan",
            "--rate",
            "720",
            "--keys",
            "4",
            "--service-us",
            "0",
            "--per-key-us",
            "2500",
            "--client-connections",
            "64",
        ];
        arguments.extend_from_slice(extra);
        output(&arguments)
    }

    #[test]
    fn the_ring_of_the_recommended_count_can_move_the_plan() {
        // Between the even split's p99 at 3 servers (33.9 ms) and that of the ketama ring of
        // 3 servers named as a tier names them (the heaviest 1.049x the mean share).
        let objective = ["--slo-p99", RING_TEST_SLO_US];
        let even = testbed_plan(&objective).unwrap_or_else(|error| panic!("{error}"));
        assert!(
            even.contains("recommended: 3 servers x 4 threads"),
            "{even}"
        );
        let on_rings = testbed_plan(&[&objective[..], &["--ring"]].concat())
            .unwrap_or_else(|error| panic!("{error}"));
        assert!(
            on_rings.contains("recommended: 4 servers x 4 threads"),
            "{on_rings}"
        );
        assert!(
            on_rings.contains("ketama ring (md5, servers from 127.0.0.1:11211:1)"),
            "{on_rings}"
        );
        assert!(on_rings.contains("no     1.049x"), "{on_rings}");
        // The pool's own servers, and the recommended count's in the JSON.
        let named = testbed_plan(&[
            "--slo-p99",
            "40000",
            "--ring-servers",
            "127.0.0.1:11211",
            "--json",
        ])
        .unwrap_or_else(|error| panic!("{error}"));
        let value: serde_json::Value =
            serde_json::from_str(&named).unwrap_or_else(|error| panic!("{error}: {named}"));
        assert_eq!(
            value["ring_servers"],
            serde_json::json!([
                "127.0.0.1:11211:1",
                "127.0.0.1:11212:1",
                "127.0.0.1:11213:1"
            ])
        );
        assert!(testbed_plan(&["--slo-p99", "40000", "--ring", "--imbalance", "1.1"]).is_err());
        assert!(testbed_plan(&["--slo-p99", "40000", "--ring", "--ring-hash", "crc32"]).is_err());
    }

    #[test]
    fn plan_from_flags_and_its_errors() {
        let value = json(&[
            "plan",
            "--rate",
            "20000",
            "--keys",
            "10",
            "--service-us",
            "50",
            "--slo-p99",
            "1000",
            "--threads",
            "2,4",
            "--json",
        ]);
        assert!(value["plan"]["recommended"]["servers"].as_u64() >= Some(1));
        assert_eq!(value["plan"]["options"].as_array().map(Vec::len), Some(2));
        let table = output(&[
            "plan",
            "--rate",
            "20000",
            "--service-us",
            "50",
            "--slo-p99",
            "1000",
            "--servers",
            "3",
        ])
        .unwrap_or_else(|error| panic!("{error}"));
        assert!(table.contains("recommended:"), "{table}");
        assert!(table.contains("at 3 servers x 4 threads"), "{table}");
        let testbed =
            testbed_plan(&["--slo-p99", "40000"]).unwrap_or_else(|error| panic!("{error}"));
        assert!(
            testbed.contains(
                "recommended: 3 servers x 4 threads (p99 33875 µs: a measured p99 up to 1.18x"
            ),
            "{testbed}"
        );
        assert!(
            testbed.contains("64 client connections read in order"),
            "{testbed}"
        );
        let unreachable = output(&[
            "plan",
            "--rate",
            "1000",
            "--service-us",
            "500",
            "--slo-p99",
            "100",
        ]);
        assert!(unreachable.is_err_and(|error| error.contains("unreachable")));
        let no_service = output(&["plan", "--rate", "1000", "--slo-p99", "100"]);
        assert!(no_service.is_err_and(|error| error.contains("--service-us")));
        assert!(output(&[
            "plan",
            "--rate",
            "1000",
            "--service-us",
            "5",
            "--slo-p99",
            "100",
            "--threads",
            "0"
        ])
        .is_err());
    }

    #[test]
    fn sweep_writes_an_svg_plot() {
        let directory =
            std::env::temp_dir().join(format!("tailtrim-model-test-{}", std::process::id()));
        let path = directory.join("sweep.svg");
        let path_text = path.to_string_lossy().to_string();
        let table = output(&[
            "cheng",
            "--sweep-lambda",
            "10000:70000:20000",
            "--sweep-xi",
            "0,0.6",
            "--plot",
            &path_text,
        ])
        .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            table.lines().filter(|line| line.contains("0000 ")).count(),
            8,
            "{table}"
        );
        let svg = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            svg.starts_with("<svg") && svg.contains("upper bound"),
            "no plot at {path_text}"
        );
        let _ = std::fs::remove_dir_all(&directory);
    }
}
