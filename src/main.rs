use clap::Parser;
use tracing_subscriber::EnvFilter;

use webchecker::config::Config;

fn init_logging(cfg: &Config) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.log_level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    // Colours only on a terminal: `kubectl logs` would show escape codes verbatim.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::stdout().is_terminal());
    if cfg.log_format == "json" {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() {
    let cfg = Config::parse();
    init_logging(&cfg);
    if let Err(e) = webchecker::run(cfg).await {
        tracing::error!(error = %e, kind = e.metric_label(), "webchecker-operator failed");
        eprintln!("webchecker-operator: {e}");
        std::process::exit(1);
    }
}
