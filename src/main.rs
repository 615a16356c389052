use clap::Parser;
use tracing_subscriber::EnvFilter;

use webchecker::config::Config;

/// Logs go through a bounded buffer to a thread of their own, and lines are
/// dropped when it is full: a stalled stdout (a full disk, a slow log pipe)
/// must never stop probing. The guard flushes what is buffered when dropped.
/// Log lines waiting for the writer thread at most.
const LOG_BUFFER_LINES: usize = 8_192;

fn init_logging(cfg: &Config) -> tracing_appender::non_blocking::WorkerGuard {
    // The default buffer of 128,000 lines is 4 MiB allocated up front
    // (docs/benchmarks.md, part 8); lines beyond the buffer are dropped
    // (lossy) rather than block a task.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(LOG_BUFFER_LINES)
        .lossy(true)
        .thread_name("log-writer")
        .finish(std::io::stdout());
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.log_level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    // Colours only on a terminal: `kubectl logs` would show escape codes verbatim.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(writer)
        .with_ansi(std::io::stdout().is_terminal());
    if cfg.log_format == "json" {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
    guard
}

/// One malloc arena for every thread. glibc gives each thread that meets a
/// locked arena one of its own (up to 8 per core), and a replica's memory is
/// many small, long-lived allocations made by whichever runtime thread ran the
/// task: spread over several arenas, their free space is not shared and RSS
/// grows (docs/benchmarks.md, part 3). Small allocations still skip the lock
/// through each thread's cache (tcache).
#[cfg(target_env = "gnu")]
fn one_malloc_arena() {
    // SAFETY: mallopt only sets an allocator parameter; it runs before any
    // thread but this one exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(not(target_env = "gnu"))]
fn one_malloc_arena() {}

/// How often freed heap goes back to the kernel.
#[cfg(target_env = "gnu")]
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Gives the kernel back the free pages inside the heap, every
/// [`TRIM_EVERY`]. glibc returns only the free space at the heap's top on
/// its own; a burst (a mass placement, thousands of first probes and their
/// Events) frees memory between allocations that live on, and RSS would
/// keep it. A thread of its own: it takes the allocator's lock for about a
/// millisecond, never a runtime worker.
#[cfg(target_env = "gnu")]
fn trim_heap_periodically() {
    let spawned = std::thread::Builder::new()
        .name("heap-trim".into())
        .spawn(|| {
            loop {
                std::thread::sleep(TRIM_EVERY);
                // SAFETY: malloc_trim only releases free memory of the allocator.
                unsafe {
                    libc::malloc_trim(0);
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("webchecker-operator: no heap trimming thread: {e}");
    }
}

#[cfg(not(target_env = "gnu"))]
fn trim_heap_periodically() {}

fn main() {
    one_malloc_arena();
    trim_heap_periodically();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime");
    runtime.block_on(run());
}

async fn run() {
    // One rustls provider for the whole process (the prober and kube's
    // client), named here rather than left to the crate features a build
    // unified: the bench's build compiles a second provider in.
    let _ = webchecker::probe::crypto_provider().install_default();
    let cfg = Config::parse();
    let logs = init_logging(&cfg);
    if let Err(e) = webchecker::run(cfg).await {
        tracing::error!(error = %e, kind = e.metric_label(), "webchecker-operator failed");
        drop(logs);
        eprintln!("webchecker-operator: {e}");
        std::process::exit(1);
    }
}
