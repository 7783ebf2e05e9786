//! The `weir` binary.

use clap::Parser;
use tokio_util::sync::CancellationToken;
use weir_server::config::{Cli, Command};

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    // Sessions plan statements on these threads. DataFusion plans by
    // recursion, and an unoptimized build's async frames are large; 2 MiB
    // (tokio's default) ran out on an UPDATE ... FROM in a debug build.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(weir_server::WORKER_STACK_BYTES)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let Command::Serve(config) = cli.command;
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            let ctrl_c = tokio::signal::ctrl_c();
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => {
                        let _ = ctrl_c.await;
                        on_signal.cancel();
                        return;
                    }
                };
            tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            }
            tracing::info!("shutting down");
            on_signal.cancel();
        });
        match weir_server::server::run(config, shutdown).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("weir: {e}");
                if let Some(hint) = e.hint() {
                    eprintln!("hint: {hint}");
                }
                std::process::ExitCode::FAILURE
            }
        }
    })
}
