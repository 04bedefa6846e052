//! Where `cluster status`, `add` and `remove` find a tier: the running tier's state file in
//! its run directory (written by `cluster up`), else the addresses the tier file gives (a
//! tier deployed on other machines), or one proxy named by its addresses.
//!
//! ```text
//!   Locate (tier file?, --run-dir, --proxy, --admin)
//!     ──find──> (TierConfig?, run dir) ──running_state──> TierState?
//!     ──status_targets──> the nodes to sample (status::sample)
//! ```

use std::path::{Path, PathBuf};

use crate::config::{TierPlan, DEFAULT_RUN_DIR};
use crate::state::Role;
use crate::status::{targets_from_plan, targets_from_state, Target};
use crate::{PortChoice, TierConfig, TierError, TierState};

/// Where `status`, `add` and `remove` find the tier.
#[derive(clap::Args, Debug)]
pub struct Locate {
    /// The tier file; its run directory's state file gives the running addresses.
    pub tier: Option<PathBuf>,
    /// Run directory of the tier (default: the tier file's, else `tier-run`).
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// A proxy's client address, instead of a tier (its backends are listed from its stats).
    #[arg(long, value_name = "ADDR")]
    pub proxy: Option<String>,
    /// A proxy's admin address (with --proxy for status; alone for add/remove).
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,
}

impl Locate {
    /// The tier file (when given) and the run directory to look in.
    pub fn find(&self) -> Result<(Option<TierConfig>, PathBuf), TierError> {
        let config = match &self.tier {
            Some(path) => Some(TierConfig::read(path)?),
            None => None,
        };
        let run_dir = self.run_dir.clone().unwrap_or_else(|| {
            PathBuf::from(
                config
                    .as_ref()
                    .map_or(DEFAULT_RUN_DIR, |config| config.tier.run_dir.as_str()),
            )
        });
        Ok((config, run_dir))
    }

    /// The tier's name and the nodes `status` samples: `--proxy`, else the running tier's,
    /// else the tier file's at the addresses it gives.
    pub fn status_targets(&self) -> Result<(String, Vec<Target>), TierError> {
        if let Some(proxy) = &self.proxy {
            let target = Target {
                role: Role::Proxy,
                name: proxy.clone(),
                address: proxy.clone(),
                admin: self.admin.clone(),
                pid: None,
                exited: None,
                nutcracker: false,
            };
            return Ok((String::new(), vec![target]));
        }
        let (config, run_dir) = self.find()?;
        if let Some(state) = running_state(&run_dir) {
            return Ok((state.name.clone(), targets_from_state(&state)));
        }
        match config {
            Some(config) => {
                let plan = written_plan(&config)?;
                Ok((plan.name.clone(), targets_from_plan(&plan)))
            }
            None => Err(TierError::NotRunning(format!(
                "no running tier in {} (give the tier file, --run-dir or --proxy)",
                run_dir.display()
            ))),
        }
    }
}

/// The running tier's state, if `run_dir` holds one.
pub fn running_state(run_dir: &Path) -> Option<TierState> {
    TierState::read_running(run_dir).ok()
}

/// The tier file's nodes at the addresses it gives.
pub fn written_plan(config: &TierConfig) -> Result<TierPlan, TierError> {
    config.plan(PortChoice::AsWritten, || {
        Err(TierError::Config("no free ports here".into()))
    })
}
