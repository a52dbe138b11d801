//! `fperf --generate WHAT`: the man pages and the shell completions, written from the
//! same clap definition as `--help`, so the packaged copies never drift from it; and the
//! JSON Schema of the JSON output, written from the types that print it.

use crate::cli::{Cli, Generate};
use clap::{Command, CommandFactory};
use clap_complete::Shell;
use std::io::{self, Write};
use std::process::ExitCode;

/// A command line and what it does, for a man page's EXAMPLES.
type Example = (&'static str, &'static str);

/// fperf(1)'s examples.
const FPERF_EXAMPLES: &[Example] = &[
    (
        "fperf -s",
        "Serve tests on port 28444; its first line names the ports that tests use.",
    ),
    (
        "fperf -c HOST --time 10",
        "Send bulk TCP data to HOST's server for 10 seconds; both ends' figures are printed.",
    ),
    (
        "fperf -c HOST --reverse -t 4 --time 10",
        "Four streams of data from the server to the client, as iperf3's -R -P 4 -t 10.",
    ),
    (
        "fperf -c HOST -u -b 1G --time 10",
        "UDP at 1 Gbit/s for 10 seconds: the report has loss, reordering and jitter.",
    ),
    (
        "fperf -c HOST --echo -l 64 --time 5",
        "Round trips of 64-byte requests echoed whole, as sockperf's ping-pong: the \
         latency percentiles.",
    ),
    (
        "fperf -c HOST --crr -l 1 --time 5",
        "A new TCP connection for each request, as netperf's TCP_CRR.",
    ),
    (
        "fperf --loopback --json -m 64",
        "Server and client in this process over 127.0.0.1, the figures as one JSON document.",
    ),
    (
        "fperf -c HOST --iperf3 --time 10",
        "A test against a stock iperf3 server (iperf3 -s).",
    ),
    (
        "fperf --generate man | man -l -",
        "Read this page from the binary itself.",
    ),
];

/// fperf-mesh(1)'s examples.
const MESH_EXAMPLES: &[Example] = &[
    (
        "fperf -s --allow-mesh --auth-key /etc/fperf.key",
        "On each host: a server that runs the tests a coordinator holding the key asks for.",
    ),
    (
        "fperf mesh --auth-key /etc/fperf.key host1 host2 host3",
        "From any host: bulk TCP between every ordered pair of the three, printed as a matrix.",
    ),
    (
        "fperf mesh --auth-key /etc/fperf.key --pattern ring -r --hostfile hosts.txt",
        "The round trip from each host of hosts.txt to the next.",
    ),
    (
        "fperf mesh --auth-key /etc/fperf.key --json --fail-on-outliers a b c",
        "The matrix as JSON; the exit status is 1 if a pair failed or stands out.",
    ),
];

/// fperf-exporter(1)'s examples.
const EXPORTER_EXAMPLES: &[Example] = &[
    (
        "fperf exporter",
        "Answer Prometheus's scrapes on 127.0.0.1:9579; any target may be probed.",
    ),
    (
        "fperf exporter --listen 0.0.0.0:9579 --allow fperf1 --allow fperf2",
        "Answer other hosts too, whose probes may test the servers fperf1 and fperf2 only.",
    ),
    (
        "curl 'http://127.0.0.1:9579/probe?target=fperf1&duration=2'",
        "One probe by hand: a 2-second test against fperf1's server, as Prometheus runs it.",
    ),
];

/// Writes what `--generate` asks for to stdout.
pub fn write_stdout(what: Generate) -> ExitCode {
    match write(what, Cli::command(), &mut io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fperf: error: --generate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `what` for `cmd`, the whole command line definition.
fn write(what: Generate, mut cmd: Command, out: &mut dyn Write) -> io::Result<()> {
    let shell = match what {
        Generate::Man => return man_page(cmd, FPERF_EXAMPLES, out),
        Generate::ManMesh => return man_page(subcommand(cmd, "mesh")?, MESH_EXAMPLES, out),
        Generate::ManExporter => {
            return man_page(subcommand(cmd, "exporter")?, EXPORTER_EXAMPLES, out)
        }
        Generate::CompleteBash => Shell::Bash,
        Generate::CompleteZsh => Shell::Zsh,
        Generate::CompleteFish => Shell::Fish,
        Generate::JsonSchema => {
            let schema = fperf::output::json_document::to_document(
                &fperf::output::json_document::result_schema(),
            );
            return writeln!(out, "{schema}");
        }
    };
    // clap_complete panics when its writer fails; a buffer cannot, and a closed stdout
    // is then an error like any other.
    let mut script = Vec::new();
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    out.write_all(&script)
}

/// The subcommand `name` of `cmd`, named as its man page is (`fperf-mesh`).
fn subcommand(mut cmd: Command, name: &str) -> io::Result<Command> {
    // Building the command names its subcommands as `fperf-mesh`.
    cmd.build();
    cmd.find_subcommand(name)
        .cloned()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no {name} command")))
}

/// The man page of `cmd`, with an EXAMPLES section of `examples`.
fn man_page(cmd: Command, examples: &[Example], out: &mut dyn Write) -> io::Result<()> {
    let cmd = with_long_help(cmd);
    let has_options = cmd.get_arguments().any(|a| !a.is_hide_set());
    let has_subcommands = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let has_extra = cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some();
    let has_version = cmd.get_version().is_some() || cmd.get_long_version().is_some();
    let man = clap_mangen::Man::new(cmd);
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    if has_options {
        man.render_options_section(out)?;
    }
    if has_subcommands {
        man.render_subcommands_section(out)?;
    }
    if has_extra {
        man.render_extra_section(out)?;
    }
    writeln!(out, ".SH EXAMPLES")?;
    for (command, what) in examples {
        writeln!(
            out,
            ".TP\n\\fB{}\\fR\n{}",
            roff_text(command),
            roff_text(what)
        )?;
    }
    if has_version {
        man.render_version_section(out)?;
    }
    Ok(())
}

/// `text` as roff prints it literally: backslashes and dashes escaped.
fn roff_text(text: &str) -> String {
    text.replace('\\', "\\e").replace('-', "\\-")
}

/// `cmd` with every option's help also as its long help. clap_mangen writes an
/// option's long help, or else its short help unless that is hidden from `-h`: an
/// option hidden from `-h` whose help is one paragraph would have no text at all.
fn with_long_help(cmd: Command) -> Command {
    cmd.mut_args(|arg| match (arg.get_long_help(), arg.get_help().cloned()) {
        (None, Some(help)) => arg.long_help(help),
        _ => arg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated(what: Generate) -> String {
        let mut out = Vec::new();
        write(what, Cli::command(), &mut out).expect("write to a buffer");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn the_man_page_has_every_flag_that_help_shows() {
        // roff writes a dash as `\-`.
        let man = generated(Generate::Man).replace("\\-", "-");
        let cmd = Cli::command();
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long() {
                assert!(man.contains(&format!("--{long}")), "--{long} missing");
            }
        }
        assert!(man.contains("--generate"));
        assert!(man.contains("fperf-exporter(1)"));
        assert!(man.contains("fperf-mesh(1)"));
        let exporter = generated(Generate::ManExporter).replace("\\-", "-");
        assert!(exporter.starts_with(".ie"), "{exporter}");
        assert!(exporter.contains("fperf-exporter"));
        for flag in [
            "--listen",
            "--max-duration",
            "--max-probes",
            "--allow",
            "--auth-key",
        ] {
            assert!(exporter.contains(flag), "{flag} missing");
        }
        let mesh = generated(Generate::ManMesh).replace("\\-", "-");
        assert!(mesh.contains("fperf-mesh"), "{mesh}");
        for flag in [
            "--hostfile",
            "--pattern",
            "--fail-on-outliers",
            "--outlier-below",
        ] {
            assert!(mesh.contains(flag), "{flag} missing");
        }
    }

    #[test]
    fn each_shell_completes_the_flags() {
        for what in [
            Generate::CompleteBash,
            Generate::CompleteZsh,
            Generate::CompleteFish,
        ] {
            let script = generated(what);
            assert!(script.contains("loopback"), "{what:?}");
            assert!(script.contains("generate"), "{what:?}");
        }
    }

    #[test]
    fn generate_is_taken_alone() {
        let parse = |a: &[&str]| Cli::parse_args(a.iter().copied());
        let cli = parse(&["fperf", "--generate", "man"]).expect("alone");
        assert_eq!(cli.generate(), Some(Generate::Man));
        assert!(parse(&["fperf", "--generate", "man", "-s"]).is_err());
        assert!(parse(&["fperf", "--generate", "html"]).is_err());
        let cli = parse(&["fperf", "-s", "-p", "5001"]).expect("a server");
        assert_eq!(cli.generate(), None);
    }
}
