#!/usr/bin/python3
"""Runs the shell commands of README.md and docs/*.md, so that they cannot rot.

Every fenced block is ```sh (commands) or ```text (anything else); a block
without a language is an error. A sh block may carry a marker on the line
right above its fence:

  (none) or <!-- check: run -->   the commands run in turn in one shell and
                                  must exit 0
  <!-- check: pair -->            terminals: every command but the last starts
                                  in the background (pids kept, stopped by pid),
                                  the last runs bounded; success: it exits 0,
                                  its filesink files are not empty, and the
                                  background commands still run or ended
                                  with exit 0
  <!-- check: producer NAME -->   commands a later block needs running; not
                                  run on their own
  <!-- check: pair after=NAME --> a pair with the producer block NAME running
  <!-- check: gpu -->             needs a GPU: every gst-launch-1.0 pipeline is
                                  parsed (elements, properties, caps, links)
                                  without running it; nvcodec elements that
                                  this machine lacks split it into parts
                                  parsed on their own
  <!-- check: skip REASON -->     not run here; REASON says why
  needs=ELEMENT,...               (with run or pair) run only where these
                                  elements exist, else counted as skipped

Bounds a user would not mind are added where a pipeline has none: a fakesink
gets num-buffers (else rscudaipcsrc does), autovideosink (no display in CI)
becomes a bounded fakesink. A producer (a gst-launch-1.0 line with
rscudaipcsink) must run with -e, so that Ctrl-C sends an end of stream and its
consumer ends cleanly instead of failing.
This plugin's elements must be named rscudaipcsink / rscudaipcsrc in
gst-launch-1.0 lines: on GStreamer 1.24+ with nvcodec and a GPU the bare
names give GStreamer's own elements.

usage: check_doc_commands.py [--list] FILE...
GST_PLUGIN_PATH must name the folder of libgstcudaipc.so.
"""

import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND_TIMEOUT_S = 90
CONSUMER_TIMEOUT_S = 30
PRODUCER_START_S = 1.5
ADDED_BOUND = "num-buffers=5"
# Elements of GStreamer's nvcodec plugin: registered only where CUDA works, so
# a pipeline of a gpu block may name them on a machine that lacks them.
NVCODEC_PREFIXES = ("nv", "cuda")
THIS_PLUGINS_ELEMENTS = {
    "rscudaipcsink", "rscudaipcsrc", "cudaipcsink", "cudaipcsrc", "cudatestsrc", "cudaprocess",
}
MARKER = re.compile(r"^<!--\s*check:\s*(\w+)\s*(.*?)\s*-->\s*$")
# A critical or a warning GLib or GStreamer logged (GStreamer-CRITICAL **,
# GLib-GObject-WARNING **, ...): a command that logs one fails, and with
# G_DEBUG=fatal-criticals (set for every command below) a critical aborts it.
GLIB_COMPLAINT = re.compile(r"(^|[\s):])(GStreamer|GLib)[-\w]*-(CRITICAL|WARNING) \*\*")


def glib_complaints(text):
    return [line for line in (text or "").splitlines() if GLIB_COMPLAINT.search(line)]


class Block:
    def __init__(self, path, line, lang, lines, marker):
        self.path, self.line, self.lang, self.lines = path, line, lang, lines
        self.kind, rest = marker if marker else ("run", "")
        self.needs, self.after, self.name, self.reason = [], None, None, rest
        for word in rest.split():
            if word.startswith("needs="):
                self.needs = word[len("needs="):].split(",")
            elif word.startswith("after="):
                self.after = word[len("after="):]
        if self.kind == "producer":
            self.name = rest.split()[0] if rest else None

    def where(self):
        return f"{os.path.relpath(self.path, REPO)}:{self.line}"

    def commands(self):
        """The block's commands: comment lines dropped, continuations joined."""
        out, current = [], ""
        for raw in self.lines:
            line = raw.rstrip()
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            out.append(current + line)
            current = ""
        if current:
            out.append(current)
        return out


def read_blocks(path):
    blocks, errors = [], []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i, previous = 0, ""
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^(\s*)```(.*)$", line)
        if not fence:
            if line.strip():
                previous = line.strip()
            i += 1
            continue
        start, lang = i + 1, fence.group(2).strip()
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        marker = MARKER.match(previous)
        previous = ""
        if lang in ("sh", "bash", "shell", "console"):
            block = Block(path, start, lang, body, (marker.group(1), marker.group(2)) if marker else None)
            if block.kind not in ("run", "pair", "producer", "gpu", "skip"):
                errors.append(f"{block.where()}: unknown marker '{block.kind}'")
            elif block.kind == "skip" and not block.reason:
                errors.append(f"{block.where()}: a skip marker says why")
            blocks.append(block)
        elif lang == "":
            errors.append(f"{path}:{start}: a fenced block names its language (sh for commands, text otherwise)")
    return blocks, errors


def element_exists(name):
    return subprocess.run(["gst-inspect-1.0", "--exists", name]).returncode == 0


def gst_launch_argv(command):
    """The pipeline arguments of a gst-launch-1.0 command, or None."""
    try:
        argv = shlex.split(command, comments=True)
    except ValueError:
        return None
    while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
        argv = argv[1:]
    if not argv or argv[0] != "gst-launch-1.0":
        return None
    return [a for a in argv[1:] if not a.startswith("-")]


def gst_launch_options(command):
    """The options (-e, -v, ...) of a gst-launch-1.0 command."""
    try:
        argv = shlex.split(command, comments=True)
    except ValueError:
        return []
    while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
        argv = argv[1:]
    return [a for a in argv[1:] if a.startswith("-")]


def lint(block, command):
    argv = gst_launch_argv(command)
    if argv is None:
        return []
    bare = [a for a in argv if a in ("cudaipcsink", "cudaipcsrc")]
    if bare:
        return [f"{block.where()}: '{bare[0]}' in a pipeline: write rs{bare[0]} "
                "(on GStreamer 1.24+ with nvcodec and a GPU the bare name is GStreamer's own element)"]
    if "rscudaipcsink" in argv and "-e" not in gst_launch_options(command):
        return [f"{block.where()}: a producer without -e: write gst-launch-1.0 -e, so that Ctrl-C "
                f"sends an end of stream (without it the consumer fails): {command}"]
    return []


def elements_of(argv):
    """Element names of a pipeline: the first word after the start or a '!'."""
    names, expect = [], True
    for a in argv:
        if a == "!":
            expect = True
        elif expect:
            if "/" not in a and "=" not in a and "." not in a:
                names.append(a)
            expect = False
    return names


def bounded(command):
    """The command with a bound added where its pipeline has none."""
    if "num-buffers=" in command:
        return command, None
    if "autovideosink" in command:
        return command.replace("autovideosink", f"fakesink {ADDED_BOUND}"), "autovideosink -> bounded fakesink"
    # fakesink as an element, not as a property's value (video-sink=fakesink).
    fakesink = r"(?<![=\w-])fakesink\b"
    if re.search(fakesink, command):
        return re.sub(fakesink, f"fakesink {ADDED_BOUND}", command, count=1), "bound added to fakesink"
    source = r"(?<![=\w-])rscudaipcsrc\b"
    if re.search(source, command):
        return re.sub(source, f"rscudaipcsrc {ADDED_BOUND}", command, count=1), "bound added to rscudaipcsrc"
    return command, None


def filesink_files(command, cwd):
    argv = gst_launch_argv(command) or []
    out, in_filesink = [], False
    for a in argv:
        if a == "!":
            in_filesink = False
        elif a == "filesink":
            in_filesink = True
        elif in_filesink and a.startswith("location="):
            out.append(os.path.join(cwd, a[len("location="):]))
    return out


def cwd_for(command):
    # gst-launch lines write their files (frame.png) into a scratch folder;
    # scripts and cargo run from the repository root.
    argv = gst_launch_argv(command)
    return SCRATCH if argv is not None else REPO


def run_one(command, timeout):
    """One command in a shell of its own (a pair's last command)."""
    cwd = cwd_for(command)
    try:
        done = subprocess.run(["bash", "-c", command], cwd=cwd, timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return done.returncode, done.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return "timeout", out


def start_background(command):
    log = tempfile.TemporaryFile(mode="w+")
    # Its own process group, so that stopping it by its pid reaches what bash started.
    process = subprocess.Popen(["bash", "-c", command], cwd=cwd_for(command), stdout=log,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return process, log


def stop(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def tail(text, n=15):
    return "\n".join(("      " + l) for l in text.strip().split("\n")[-n:])


def check_run(block, report):
    """The block's commands in one shell, in turn, as a user types them (an
    `export` or `source` holds for the commands after it)."""
    commands = block.commands()
    everything_gst = all(gst_launch_argv(c) is not None for c in commands)
    script = "set -e\n" + "\n".join(commands)
    try:
        done = subprocess.run(["bash", "-c", script], cwd=SCRATCH if everything_gst else REPO,
                              timeout=COMMAND_TIMEOUT_S * len(commands), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        code, out = done.returncode, done.stdout
    except subprocess.TimeoutExpired as e:
        code, out = "timeout", e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    report.ran += len(commands)
    if code != 0 or glib_complaints(out):
        print(f"FAIL {block.where()}: exit {code}:\n" + "\n".join("      " + c for c in commands) + f"\n{tail(out)}")
        for line in glib_complaints(out):
            print(f"      GLib or GStreamer complained: {line}")
        return False
    for command in commands:
        print(f"ok   {block.where()}: {command}")
    return True


def check_pair(block, report, producers):
    background = []
    if block.after:
        if block.after not in producers:
            print(f"FAIL {block.where()}: no producer block named {block.after}")
            return False
        background += producers[block.after].commands()
    commands = block.commands()
    background += commands[:-1]
    consumer, note = bounded(commands[-1])
    started, problems = [], []
    try:
        for command in background:
            started.append((command, *start_background(command)))
            time.sleep(PRODUCER_START_S)
        files = filesink_files(consumer, cwd_for(consumer))
        for f in files:
            if os.path.exists(f):
                os.remove(f)
        code, out = run_one(consumer, CONSUMER_TIMEOUT_S)
        report.ran += len(background) + 1
        if code != 0:
            problems.append(f"the last command: exit {code}\n{tail(out)}")
        problems += [f"the last command: GLib or GStreamer complained: {line}"
                     for line in glib_complaints(out)]
        for f in files:
            if not os.path.exists(f) or os.path.getsize(f) == 0:
                problems.append(f"{f} missing or empty")
        for command, process, log in started:
            # A producer that finished its frames (exit 0) did its part.
            if process.poll() not in (None, 0):
                log.seek(0)
                problems.append(f"ended before the last command was done: {command}\n{tail(log.read())}")
    finally:
        for command, process, log in reversed(started):
            stop(process)
            log.seek(0)
            problems += [f"{command}: GLib or GStreamer complained: {line}"
                         for line in glib_complaints(log.read())]
            log.close()
    what = " | ".join(background + [consumer]) + (f"  [{note}]" if note else "")
    if problems:
        print(f"FAIL {block.where()}: {what}")
        for p in problems:
            print(f"      {p}")
        return False
    print(f"ok   {block.where()} (pair): {what}")
    return True


def check_gpu(block, report):
    """Parses each pipeline, nvcodec elements missing here stood in for by identity."""
    import gi
    gi.require_version("Gst", "1.0")
    from gi.repository import Gst, GLib
    Gst.init(None)
    ok = True
    for command in block.commands():
        argv = gst_launch_argv(command)
        if argv is None:
            print(f"FAIL {block.where()}: a gpu block holds only gst-launch-1.0 lines: {command}")
            ok = False
            continue
        # Elements missing here split the pipeline: the parts around them are
        # parsed on their own (a stand-in element would pass caps through and
        # make links fail that hold with the real one).
        stand_ins, parts, part, i = [], [], [], 0
        while i < len(argv):
            a = argv[i]
            starts_element = not part or part[-1] == "!"
            if starts_element and "/" not in a and "=" not in a and Gst.ElementFactory.find(a) is None \
                    and a not in THIS_PLUGINS_ELEMENTS and a.startswith(NVCODEC_PREFIXES):
                stand_ins.append(a)
                if part and part[-1] == "!":
                    part.pop()
                parts.append(part)
                part = []
                i += 1
                while i < len(argv) and argv[i] != "!":
                    i += 1  # the missing element's properties
                i += 1  # and the link after it
                continue
            part.append(a)
            i += 1
        parts.append(part)
        try:
            for part in parts:
                if part:
                    Gst.parse_launchv(part).set_state(Gst.State.NULL)
            note = f" [not on this machine, parsed around: {', '.join(stand_ins)}]" if stand_ins else ""
            print(f"ok   {block.where()} (gpu, parsed){note}: {command}")
            report.parsed += 1
        except GLib.Error as e:
            print(f"FAIL {block.where()}: does not parse: {e.message}: {command}")
            ok = False
    return ok


class Report:
    ran = parsed = 0
    skipped = []


def main():
    args = sys.argv[1:]
    listing = "--list" in args
    paths = [a for a in args if a != "--list"]
    blocks, errors = [], []
    for p in paths:
        b, e = read_blocks(p)
        blocks += b
        errors += e
    for block in blocks:
        if block.kind != "skip":
            for command in block.commands():
                errors += lint(block, command)
    if errors:
        print("\n".join(errors))
        return 1
    if listing:
        for b in blocks:
            print(f"{b.where()} {b.kind} {b.reason}".rstrip())
        return 0
    report = Report()
    producers = {b.name: b for b in blocks if b.kind == "producer"}
    failed = 0
    for block in blocks:
        missing = [e for e in block.needs if not element_exists(e)]
        if block.kind == "skip" or missing:
            reason = block.reason if block.kind == "skip" else f"needs {', '.join(missing)}, not installed here"
            report.skipped.append((block, reason))
            print(f"skip {block.where()}: {reason}")
            continue
        if block.kind == "producer":
            continue
        check = {"run": lambda b: check_run(b, report),
                 "pair": lambda b: check_pair(b, report, producers),
                 "gpu": lambda b: check_gpu(b, report)}[block.kind]
        if not check(block):
            failed += 1
    commands_skipped = sum(len(b.commands()) for b, _ in report.skipped)
    print(f"== doc commands: {report.ran} run, {report.parsed} GPU pipelines parsed, "
          f"{commands_skipped} skipped ({len(report.skipped)} blocks), {failed} blocks failed")
    return 1 if failed else 0


if __name__ == "__main__":
    flags = os.environ.get("G_DEBUG", "")
    os.environ["G_DEBUG"] = f"{flags},fatal-criticals" if flags else "fatal-criticals"
    SCRATCH = tempfile.mkdtemp(prefix="doc-commands-")
    try:
        sys.exit(main())
    finally:
        subprocess.run(["rm", "-rf", SCRATCH])
