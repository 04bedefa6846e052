//! The proxy's admin listener: the shared admin component ([`tailtrim_admin`], hyper) with
//! the endpoints every admin listener has (`/metrics`, `/health`) and the proxy's own.
//!
//! ```text
//!   GET    /metrics                                  Prometheus text (format 0.0.4)
//!   GET    /health                                   `ok` while the proxy runs
//!   GET    /pool                                     membership, phase, last change (JSON)
//!   POST   /pool/servers?server=H:P[:W]&warmup=MODE&share=F   (MODE's `+` escaped or not)
//!                                                    add a backend (or re-weight a member)
//!   DELETE /pool/servers?server=H:P&warmup=drain|cold&share=F
//!                                                    remove a backend
//!   GET    /pool/hotkeys?server=H:P&n=N              that backend's hottest tracked keys
//! ```
//!
//! Changes answer once the new ring version routes requests (after any preemptive copying);
//! a fallback warm-up goes on in the background (`GET /pool` shows when it ended). Errors are
//! `400` with a JSON `{"error": …}`. `HEAD` works wherever `GET` does; any other path is
//! `404`, a method a path does not take `405` (with `Allow`).
//!
//! Reads are open to whoever can connect. Membership changes (`POST`/`DELETE
//! /pool/servers`) follow [`MembershipAccess`] ([`tailtrim_admin::Access`]): with an admin token (`[proxy] admin_token` or
//! `admin_token_file`) they need `Authorization: Bearer <token>` and answer `401` (with
//! `WWW-Authenticate: Bearer`) without it; without a token they are allowed on a loopback
//! listener (the default `127.0.0.1:22123`) and answer `403` on any other, which start-up
//! warns about.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use tailtrim_admin::{Access, Admin, Reply, Request};
use tailtrim_client::{ChangeReport, ServerSpec};

use crate::config::ProxySection;
use crate::error::ProxyError;
use crate::frontend::Shared;
use crate::metrics::prometheus_text;

/// Who may change the pool's membership through the admin listener.
pub type MembershipAccess = Access;

/// What start-up prints about a listener bound to `bound` under `access`; `None` on
/// loopback.
pub fn startup_notice(access: &MembershipAccess, bound: SocketAddr) -> Option<String> {
    if bound.ip().is_loopback() {
        return None;
    }
    Some(match access {
        Access::Token(_) => format!(
            "admin listener on {bound} is not loopback: GET /metrics and GET /pool are open to the network; membership changes require the admin token"
        ),
        Access::Loopback | Access::Refused => format!(
            "warning: admin listener on {bound} is not loopback and no admin token is set: GET /metrics and GET /pool are open to the network, and membership changes (POST/DELETE /pool/servers) are refused with 403; set [proxy] admin_token_file or --admin-token-file to allow them"
        ),
    })
}

/// A bound admin listener with its membership policy.
pub struct AdminListener {
    listener: TcpListener,
    access: MembershipAccess,
}

impl AdminListener {
    /// Reads the admin token of `proxy`, decides the policy for the address `listener` is
    /// bound to, and prints the start-up notice (to stderr) when that is not loopback.
    pub fn new(listener: TcpListener, proxy: &ProxySection) -> Result<AdminListener, ProxyError> {
        let token = proxy.admin_token()?;
        let bound = listener.local_addr().map_err(|source| ProxyError::Io {
            what: "reading the admin listener's address".to_string(),
            source,
        })?;
        let access = MembershipAccess::decide(token, bound.ip());
        if let Some(notice) = startup_notice(&access, bound) {
            eprintln!("tailtrim proxy: {notice}");
        }
        Ok(AdminListener { listener, access })
    }

    /// The address bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The membership policy.
    pub fn access(&self) -> &MembershipAccess {
        &self.access
    }
}

/// The body of a `404`: what the listener answers.
const NOT_FOUND: &str = "not found; tailtrim proxy admin: GET /metrics, GET /health, GET /pool, POST|DELETE /pool/servers?server=H:P, GET /pool/hotkeys?server=H:P\n";

/// The proxy's admin routes over `shared`, under `access`.
pub fn routes(shared: Arc<Shared>, access: MembershipAccess) -> Admin {
    let metrics = Arc::clone(&shared);
    let pool = Arc::clone(&shared);
    let hot = Arc::clone(&shared);
    Admin::new(NOT_FOUND)
        .with_metrics(move || prometheus_text(metrics.metrics_view()))
        .read("/pool", move |_| {
            let body = status_json(&pool);
            Box::pin(std::future::ready(Reply::ok("application/json", body)))
        })
        .read("/pool/hotkeys", move |request| {
            let body = hot_keys_json(&hot, &request);
            Box::pin(std::future::ready(Reply::ok("application/json", body)))
        })
        .change(
            "/pool/servers",
            "POST, DELETE",
            "membership changes",
            move |request| {
                let shared = Arc::clone(&shared);
                Box::pin(async move {
                    let adding = request.method == "POST";
                    let answer = change(
                        &shared,
                        adding,
                        request.param("server"),
                        request.param("warmup"),
                        request.param("share"),
                    )
                    .await;
                    match answer {
                        Ok(body) => Reply::ok("application/json", body),
                        Err(message) => Reply {
                            status: 400,
                            content_type: "application/json",
                            header: None,
                            body: serde_json::json!({ "error": message }).to_string(),
                        },
                    }
                })
            },
        )
        .with_access(access)
}

/// Accepts admin connections forever.
pub async fn serve(admin: AdminListener, shared: Arc<Shared>) {
    Arc::new(routes(shared, admin.access))
        .serve(admin.listener)
        .await;
}

/// `GET /pool/hotkeys?server=H:P&n=N`: that backend's hottest tracked keys.
fn hot_keys_json(shared: &Shared, request: &Request) -> String {
    let n = request
        .param("n")
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let server = request.param("server").unwrap_or_default();
    let keys: Vec<serde_json::Value> = shared
        .pool
        .hot_keys(server, n)
        .into_iter()
        .map(|hot| {
            serde_json::json!({
                "key": String::from_utf8_lossy(&hot.key),
                "count": hot.count,
                "error": hot.error,
            })
        })
        .collect();
    serde_json::json!({ "server": server, "keys": keys }).to_string()
}

/// Applies a join/re-weight (`adding`) or a removal; the JSON answer describes the change.
async fn change(
    shared: &Shared,
    adding: bool,
    server: Option<&str>,
    warmup: Option<&str>,
    share: Option<&str>,
) -> Result<String, String> {
    let server = server.ok_or("missing server=HOST:PORT[:WEIGHT]")?;
    let mut section = shared.warmup.clone();
    if let Some(share) = share {
        section.warm_share = share.parse().map_err(|_| format!("bad share {share:?}"))?;
    }
    let default_mode = if adding {
        section.mode.clone()
    } else {
        section.remove_mode.clone()
    };
    // A query decodes `+` to a space, and no mode name holds one: `preemptive+fallback`
    // written unescaped means what it says.
    let warmup = warmup.map(|mode| mode.replace(' ', "+"));
    let settings = section
        .settings(warmup.as_deref().unwrap_or(&default_mode))
        .map_err(|error| error.to_string())?;
    let verb = if adding { "add" } else { "remove" };
    let report = if adding {
        let spec = ServerSpec::parse(server).map_err(|error| error.to_string())?;
        shared.pool.add_server(spec, settings).await
    } else {
        let address = match ServerSpec::parse(server) {
            Ok(spec) => spec.address(),
            Err(_) => server.to_string(),
        };
        shared.pool.remove_server(&address, settings).await
    }
    .map_err(|error| {
        tracing::warn!("tailtrim proxy: admin {verb} {server} refused: {error}");
        error.to_string()
    })?;
    tracing::info!(
        "tailtrim proxy: admin {verb} {server} (warm-up {}): version {}, servers {} -> {}",
        report.mode,
        report.version,
        report.before.join(","),
        report.after.join(",")
    );
    Ok(report_json(&report).to_string())
}

fn report_json(report: &ChangeReport) -> serde_json::Value {
    serde_json::json!({
        "version": report.version,
        "mode": report.mode,
        "before": report.before,
        "after": report.after,
        "moved_tracked": report.moved_tracked,
        "moved_held": report.moved_held,
        "unlisted": report.unlisted,
        "planned": report.planned,
        "copied": report.copied,
        "copy_ms": report.copy_ms,
        "warmup_end": report.warmup_end,
        "warmup_ms": report.warmup_ms,
    })
}

fn status_json(shared: &Shared) -> String {
    let status = shared.pool.status();
    let stats = shared.pool.stats();
    serde_json::json!({
        "version": status.version,
        "servers": status.servers,
        "phase": status.phase,
        "last_change": status.last_change.as_ref().map(report_json),
        "copies": stats.copies.get(),
        "copy_misses": stats.copy_misses.get(),
        "fallback_reads": stats.fallback_reads.get(),
        "fallback_hits": stats.fallback_hits.get(),
        "fenced_writes": stats.fenced_writes.get(),
        "former_owner_deletes": stats.former_owner_deletes.get(),
        "leftovers_deleted": stats.leftovers_deleted.get(),
        "history_gaps": stats.history_gaps.get(),
        "tracker_bytes": shared.pool.tracker_memory(),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notice_follows_the_token_and_the_bound_address() {
        let loopback: SocketAddr = "127.0.0.1:22123".parse().unwrap();
        let public: SocketAddr = "0.0.0.0:22123".parse().unwrap();
        let open = MembershipAccess::decide(None, loopback.ip());
        assert_eq!(open, MembershipAccess::Loopback);
        assert_eq!(startup_notice(&open, loopback), None);
        let refused = MembershipAccess::decide(None, public.ip());
        assert_eq!(refused, MembershipAccess::Refused);
        let warning = startup_notice(&refused, public).unwrap();
        assert!(
            warning.starts_with("warning:") && warning.contains("403"),
            "{warning}"
        );
        let guarded = MembershipAccess::decide(Some("t".to_string()), public.ip());
        assert!(startup_notice(&guarded, public)
            .unwrap()
            .contains("require the admin token"));
    }
}
