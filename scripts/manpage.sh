#!/usr/bin/env bash
# Writes the stallwatch(8) man page from the binary itself: help2man over `stallwatch --help`
# and `stallwatch version`, plus one section per subcommand holding that subcommand's --help, so
# the page cannot drift from the program, and the sections --help has no room for: exit status,
# signals, environment, files, examples, see also (CMake runs this at every build of the binary;
# the packaging test checks every subcommand's usage line is in it).
# Usage: scripts/manpage.sh BINARY OUTPUT
set -euo pipefail
bin=$1
out=$2
here=$(cd "$(dirname "$0")/.." && pwd)
include=$(mktemp)
trap 'rm -f "$include"' EXIT

# roff: backslashes escaped, a line starting with '.' or '\'' protected.
roff() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }

{
  echo "[COMMANDS]"
  for cmd in run check explain query demo stacks export mcp; do
    echo ".SS \"stallwatch $cmd\""
    echo ".nf"
    "$bin" "$cmd" --help | roff
    echo ".fi"
  done
  # Each section: no hyphenation and a ragged right margin (paths, variables, URLs, commands).
  cat << 'ROFF'
[EXIT STATUS]
.nh
.ad l
.TP
.B 0
the command did what it was asked: the daemon stopped on a signal, a report or the rows were
printed (also when nothing happened in the period), \fBcheck\fR found this host can trace.
.TP
.B 1
a runtime failure: the store cannot be read or opened, the port cannot be listened on, another
daemon holds the lock, a BPF program does not load, \fBcheck\fR found this host cannot trace.
One line on stderr says what failed and how to fix it.
.TP
.B 2
bad usage or configuration: an unknown command or flag, a value out of its range, a bad
\fB\-\-config\fR file line or \fBSTALLWATCH_\fR variable, a path given that does not exist. One
line names it and where the help is:
.RS
.nf
stallwatch: unknown command 'x' (see `stallwatch \-\-help`)
.fi
.RE
.PP
77 is no exit status of stallwatch's: its test programs return it to mark a test skipped.
[ENVIRONMENT]
.nh
.ad l
.TP
.B STALLWATCH_<FLAG>
every flag of \fBrun\fR but \fB\-\-help\fR and \fB\-\-version\fR: the long name in upper case,
\(aq.\(aq and \(aq\-\(aq written \(aq_\(aq (\fBSTALLWATCH_WINDOW=5s\fR,
\fBSTALLWATCH_LOG_LEVEL=debug\fR); a repeatable flag takes a comma-separated list, a switch
true or false, an empty variable counts as unset. The command line wins over it, it wins over
the config file. Any other \fBSTALLWATCH_*\fR name is warned about at start, with the closest
real one.
.TP
.B STALLWATCH_OPTS
the systemd unit's extra flags for \fBrun\fR, set in \fI/etc/default/stallwatch\fR.
.TP
.B OTEL_EXPORTER_OTLP_ENDPOINT
turns on the OTLP push of \fBrun\fR and \fBdemo\fR (as \fB\-\-otlp\-endpoint\fR); with the
other standard variables: \fBOTEL_EXPORTER_OTLP_HEADERS\fR,
\fBOTEL_EXPORTER_OTLP_CERTIFICATE\fR, \fBOTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE\fR,
\fBOTEL_EXPORTER_OTLP_CLIENT_KEY\fR, \fBOTEL_EXPORTER_OTLP_TIMEOUT\fR,
\fBOTEL_EXPORTER_OTLP_COMPRESSION\fR, \fBOTEL_EXPORTER_OTLP_PROTOCOL\fR (http/protobuf only),
most of them also per signal (\fBOTEL_EXPORTER_OTLP_METRICS_*\fR,
\fBOTEL_EXPORTER_OTLP_LOGS_*\fR), \fBOTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE\fR,
\fBOTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION\fR,
\fBOTEL_METRIC_EXPORT_INTERVAL\fR, \fBOTEL_SERVICE_NAME\fR and \fBOTEL_RESOURCE_ATTRIBUTES\fR.
A \fB\-\-otlp\-*\fR flag or its \fBSTALLWATCH_OTLP_*\fR variable wins over them; they win over
the config file.
.TP
.B NODE_NAME
the node whose pods \fBrun\fR lists for the pod, namespace and container labels (the default
of \fB\-\-kube\-node\fR; the DaemonSet sets it from spec.nodeName), else the hostname.
.TP
.B KUBERNETES_SERVICE_HOST\fR, \fBKUBERNETES_SERVICE_PORT
set in a pod: \fBrun\fR asks this API server for the names (the default of \fB\-\-kube\-api\fR).
.TP
.B NOTIFY_SOCKET\fR, \fBWATCHDOG_USEC
systemd's (Type=notify, WatchdogSec=): \fBrun\fR says READY=1 once its probes are attached and
WATCHDOG=1 every window.
.TP
.B TMPDIR
where \fBdemo\fR puts its store without \fB\-\-db\fR (default /tmp).
.TP
.B SOURCE_DATE_EPOCH
at build time only: the build date \fB\-\-version\fR prints and this page's date (default: the
last commit's), so that two builds of one commit are the same.
[SIGNALS]
.nh
.ad l
.TP
.B SIGTERM\fR, \fBSIGINT
\fBrun\fR stops (\fBsystemctl stop\fR): the partial window since the last one is published and
stored, the store writes what is queued and is flushed, the OTLP pusher sends once more, the
probes are detached; the last log line says what was flushed. \fBdemo \-\-listen\fR ends its
story and prints the report.
.TP
.B SIGHUP
\fBrun\fR reloads (\fBsystemctl reload\fR, the unit's ExecReload=): the log settings
(\fB\-\-log.level\fR, \fB\-\-log.format\fR, \fB\-v\fR) are read again from the flags, the
environment and the config file and applied. \fB\-\-web.config.file\fR is re-read whenever it
changes anyway. Any other setting that changed takes a restart, and the log line says which.
[FILES]
.nh
.ad l
.TP
.I /etc/default/stallwatch
STALLWATCH_OPTS and OTEL_* variables for the systemd unit.
.TP
.I /etc/stallwatch/stallwatch.conf
\fBrun\fR's flags as name = value lines, read when it exists (\fB\-\-config\fR FILE; none: no
file).
.TP
.I /var/lib/stallwatch/stallwatch.db
the chain store (SQLite, WAL; \fB\-\-db\fR), and beside it \fIstallwatch.db.lock\fR: one daemon
per store.
.TP
.I /run/stallwatch/stallwatch.lock
one daemon per node: \fBrun\fR holds it locked with its PID, and a second one exits 1 naming the
first (\fB\-\-lock\-file\fR; the unit's RuntimeDirectory=).
.TP
.I /usr/share/bash-completion/completions/stallwatch
the bash completion: commands, flags and the demo's scenarios, asked of the binary.
[EXAMPLES]
.nh
.ad l
.TP
.B sudo stallwatch check
Can this host trace? Each missing piece with its fix; exit 0 when it can.
.TP
.B sudo systemctl enable \-\-now stallwatch
The daemon under systemd; its flags in \fI/etc/stallwatch/stallwatch.conf\fR or STALLWATCH_OPTS.
.TP
.B sudo stallwatch run \-\-web.listen\-address 127.0.0.1:9464 \-\-window 1s
The daemon in the foreground; \fBcurl 127.0.0.1:9464/metrics\fR.
.TP
.B stallwatch explain \-\-since 30m \-\-per\-process
The last half hour's causal chains: root cause, effect, contributors and fix, and each
process's calls.
.TP
.B stallwatch stacks \-\-since 1h | flamegraph.pl > stalls.svg
A flame graph of the slow CUDA calls, weighted by their stalled time.
.TP
.B stallwatch query \-\-format csv \(aqSELECT kind, severity, count(*) FROM chains GROUP BY 1, 2\(aq
Read-only SQL over the store.
.TP
.B stallwatch demo incident \-\-fast \-\-db /tmp/stallwatch\-demo.db
A synthetic incident through the real engine and store, no root and no GPU; then
\fBstallwatch explain \-\-db /tmp/stallwatch\-demo.db\fR.
[SEE ALSO]
.nh
.ad l
.BR systemctl (1),
.BR journalctl (1)
.PP
The documentation: https://github.com/stallwatch/stallwatch/tree/main/docs (commands,
configuration, deployment, metrics, chains, the store).
.br
The runbook of each alert: \fI/usr/share/doc/stallwatch/runbooks/\fR.
ROFF
} > "$include"

# A reproducible date: the last commit's, when the source is a git checkout.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$here" log -1 --format=%ct 2>/dev/null || date +%s)
  export SOURCE_DATE_EPOCH
fi
# The footer's version: `stallwatch version` without its commit (0.1.0+git340), so that it
# does not run into the date in the middle of the footer; the exporters' --version shape
# (`stallwatch, version ...`) is not help2man's `program version` either.
version=$("$bin" version | sed -n '1s/^stallwatch, version \([^ ]*\) .*/\1/p')
[ -n "$version" ] || { echo "manpage.sh: $bin version printed no version" >&2; exit 1; }
version=$(sed -E 's/^(.*\+git[0-9]+)\.[0-9a-f]+$/\1/' <<< "$version")
help2man --no-info --section 8 \
  --name "explain slow CUDA calls by what the host did to them (eBPF)" \
  --version-string "stallwatch $version" \
  --include "$include" --output "$out" "$bin"
