#!/usr/bin/env python3
"""Runs a bench and writes what it printed into docs/benchmarks.md.

    python3 scripts/bench-record.py [--file PATH] ID [-- COMMAND ...]
    python3 scripts/bench-record.py [--file PATH] --list
    python3 scripts/bench-record.py [--file PATH] --check

docs/benchmarks.md says how each figure is measured and what it means; the
figures themselves are in blocks that only this script writes, one per
bench (or per way of running one):

    <!-- figures: ID | COMMAND -->
    ...
    <!-- /figures -->

`bench-record.py ID` runs the block's COMMAND from the repository's root
(its output goes to the terminal as it comes), and when it succeeds puts
in the block what it printed on stdout, verbatim but for the log records
of an operator running in the bench's process, under a line with the
date, the commit, whether the tree had changes, the command and the
machine. `-- COMMAND ...` runs another command for the same block (a build
without LTO, another binary, extra flags): the block then says that
command ran. A command that fails leaves the file as it was.

`--file PATH` works on another file (the script's own test does).
`--list` prints the blocks' ids, dates and commands; `--check` exits 1
when a block is not well formed (no closing marker, a duplicate id, no
recorded date) and names it. `cargo test -p shardring-dev --test it
bench_record` runs `--check`, so the README's test command and CI fail on
a file this script could no longer update.

Standard library only.
"""

import os
import platform
import re
import shlex
import subprocess
import sys
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE = os.path.join(ROOT, "docs", "benchmarks.md")
OPEN = re.compile(r"^<!-- figures: ([a-z0-9-]+) \| (.+) -->$")
CLOSE = "<!-- /figures -->"
RECORDED = re.compile(r"^Recorded on (\d{4}-\d{2}-\d{2})")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A log record of an operator running in the bench's process (tracing's
# format): what it logged, not a figure.
LOG = re.compile(r"^\d{4}-\d{2}-\d{2}T\S+Z\s+(TRACE|DEBUG|INFO|WARN|ERROR) ")


class Block:
    """One figures block: its id, command, and where it lies in the file."""

    def __init__(self, ident, command, start, end, body):
        self.ident = ident
        self.command = command
        self.start = start  # index of the opening marker line
        self.end = end  # index of the closing marker line
        self.body = body

    def date(self):
        for line in self.body:
            found = RECORDED.match(line)
            if found:
                return found.group(1)
        return None


def parse(lines):
    """The file's blocks, and a list of what is wrong with them."""
    blocks, problems, seen = [], [], set()
    at = 0
    while at < len(lines):
        found = OPEN.match(lines[at])
        if not found:
            if lines[at].startswith("<!-- figures"):
                problems.append(f"line {at + 1}: not `<!-- figures: ID | COMMAND -->`")
            at += 1
            continue
        ident, command = found.group(1), found.group(2)
        end = next((i for i in range(at + 1, len(lines)) if lines[i] == CLOSE), None)
        nested = next(
            (i for i in range(at + 1, end or len(lines)) if OPEN.match(lines[i])), None
        )
        if end is None or nested is not None:
            problems.append(f"line {at + 1}: block `{ident}` has no `{CLOSE}` before the next")
            at += 1
            continue
        block = Block(ident, command, at, end, lines[at + 1 : end])
        if ident in seen:
            problems.append(f"line {at + 1}: a second block `{ident}`")
        seen.add(ident)
        if block.date() is None:
            problems.append(f"line {at + 1}: block `{ident}` has no `Recorded on` line")
        blocks.append(block)
        at = end + 1
    if not blocks:
        problems.append("no figures block")
    return blocks, problems


def git(*args):
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine():
    cores = os.cpu_count() or 0
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            model = next(
                (l.split(":", 1)[1].strip() for l in info if l.startswith("model name")), ""
            )
    except OSError:
        pass
    load = ""
    try:
        load = f", load {os.getloadavg()[0]:.1f} when it started"
    except OSError:
        pass
    name = model or platform.machine()
    return f"{cores} cores ({name}){load}"


def run(command):
    """Runs `command` through the shell from the root, echoing its stdout;
    its stdout, or None when it failed."""
    process = subprocess.Popen(
        command, shell=True, cwd=ROOT, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    captured = []
    for line in process.stdout:
        sys.stdout.write(line)
        plain = ANSI.sub("", line.rstrip("\n"))
        if not LOG.match(plain):
            captured.append(plain)
    if process.wait() != 0:
        return None
    while captured and not captured[-1].strip():
        captured.pop()
    while captured and not captured[0].strip():
        captured.pop(0)
    return captured


def record(ident, override):
    with open(FILE, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, problems = parse(lines)
    block = next((b for b in blocks if b.ident == ident), None)
    if block is None:
        known = ", ".join(b.ident for b in blocks)
        sys.exit(f"bench-record: no block `{ident}` in {FILE} (blocks: {known})")
    command = override or block.command
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    # The file's own blocks are no change of the code measured.
    changed = git("status", "--porcelain", "--", ".", ":!docs/benchmarks.md")
    dirty = " with uncommitted changes" if changed else ""
    header = machine()
    print(f"bench-record: {ident}: {command}", file=sys.stderr)
    output = run(command)
    if output is None:
        sys.exit(f"bench-record: `{command}` failed; {FILE} is unchanged")
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    body = [
        f"Recorded on {date} at `{commit}`{dirty}, on {header}:",
        f"`{command}`",
        "",
        "```text",
        *output,
        "```",
    ]
    # Read again: the bench may have run for minutes, and the file may have
    # been edited meanwhile (another block recorded).
    with open(FILE, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, _ = parse(lines)
    block = next(b for b in blocks if b.ident == ident)
    lines[block.start + 1 : block.end] = body
    with open(FILE, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"bench-record: {ident} recorded in {os.path.relpath(FILE, ROOT)}", file=sys.stderr)


def main(argv):
    global FILE
    if argv[:1] == ["--file"] and len(argv) > 1:
        FILE = os.path.abspath(argv[1])
        argv = argv[2:]
    if argv == ["--list"] or argv == ["--check"]:
        with open(FILE, encoding="utf-8") as f:
            blocks, problems = parse(f.read().split("\n"))
        if argv == ["--list"]:
            for block in blocks:
                print(f"{block.ident:24} {block.date() or 'never':10}  {block.command}")
            return 0
        for problem in problems:
            print(f"{os.path.relpath(FILE, ROOT)}: {problem}")
        print(f"{len(blocks)} figures blocks, {len(problems)} problems")
        return 1 if problems else 0
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    ident, rest = argv[0], argv[1:]
    override = None
    if rest:
        if rest[0] != "--" or len(rest) < 2:
            sys.exit("bench-record: after the id, only `-- COMMAND ...`")
        # One word is a shell command as written; several are quoted.
        override = rest[1] if len(rest) == 2 else shlex.join(rest[1:])
    record(ident, override)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
