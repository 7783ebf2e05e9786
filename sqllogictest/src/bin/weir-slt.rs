//! `weir-slt`: run `.slt` files against a running server.
//!
//! ```text
//! weir-slt [--host 127.0.0.1] [--port 5488] [--user weir] [--db weir]
//!          [--password PW] [--engine weir|postgres] [--override] FILES...
//! ```
//!
//! `--engine postgres` runs the records meant for PostgreSQL (`onlyif postgres`)
//! instead of Weir's, to check expectations against a real PostgreSQL.
//! Without files it runs every file in `sqllogictest/tests/`. `--override`
//! rewrites each file's expected output from the server's answers; review the
//! diff, since the files must hold what PostgreSQL would return.

use std::path::PathBuf;
use std::process::ExitCode;

use weir_sqllogictest::{ConnectOptions, bundled_files, override_files, run_file, summarize};

const USAGE: &str = "usage: weir-slt [--host HOST] [--port PORT] [--user USER] [--db DB] [--password PW] [--engine weir|postgres] [--override] FILES...";

fn main() -> ExitCode {
    let mut options = ConnectOptions::new("127.0.0.1", 5488);
    let mut rewrite = false;
    let mut files: Vec<PathBuf> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| match args.next() {
            Some(v) => Ok(v),
            None => Err(format!("{name} needs a value\n{USAGE}")),
        };
        let parsed: Result<(), String> = match arg.as_str() {
            "--host" => value("--host").map(|v| options.host = v),
            "--port" => value("--port").and_then(|v| {
                v.parse()
                    .map(|p| options.port = p)
                    .map_err(|e| format!("--port {v}: {e}"))
            }),
            "--user" => value("--user").map(|v| options.user = v),
            "--db" => value("--db").map(|v| options.dbname = v),
            "--password" => value("--password").map(|v| options.password = Some(v)),
            "--engine" => value("--engine").map(|v| options.engine = v),
            "--override" => {
                rewrite = true;
                Ok(())
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            flag if flag.starts_with("--") => Err(format!("unknown option {flag}\n{USAGE}")),
            file => {
                files.push(PathBuf::from(file));
                Ok(())
            }
        };
        if let Err(message) = parsed {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    }
    if files.is_empty() {
        files = bundled_files();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir-slt: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        if rewrite {
            return match override_files(&options, &files).await {
                Ok(()) => {
                    println!(
                        "rewrote {} file(s); review the diff before committing",
                        files.len()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("weir-slt: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        let mut reports = Vec::new();
        for file in &files {
            let report = run_file(&options, file).await;
            eprintln!(
                "{} {}",
                if report.ok() { "ok    " } else { "FAILED" },
                file.display()
            );
            reports.push(report);
        }
        print!("{}", summarize(&reports));
        if reports.iter().all(|r| r.ok()) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    })
}
