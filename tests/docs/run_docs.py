#!/usr/bin/python3
"""run_docs.py — the user's guide against the code (CTest `docs`).

Checks README.md and docs/*.md:
  - README.md is under 250 lines, shows the two commands, and links every
    docs/*.md chapter;
  - every relative link resolves to an existing file, and every #anchor to a
    heading of that file (GitHub's heading ids);
  - no project issue numbers ("issue" before a number, "(issue");
  - every code block marked as tested runs and exits as marked.

A tested block is a fence whose info string holds the word `tested`
(```bash tested, ```bash tested exit=2), or an ordinary fence right after a
line `<!-- tested -->` (`<!-- tested exit=2 -->`). The blocks of one file
run in order, each as `bash -e -o pipefail`, in one scratch folder per file
that starts with a copy of inputs/, jobs/ linked to the source's,
build/trident linked to the binary under test, and `trident`, `mpiexec`,
`mpirun` first on PATH (the binary, and wrappers of the MPI launcher CMake
found) — so a block reads exactly as a user types it.
A failure names FILE:LINE (the opening fence) and shows the block's output.

usage: run_docs.py --trident BIN [--mpiexec MPIEXEC] [--root SRC] [--work DIR]
                   [--file README.md|docs/X.md]... [--timeout S] [--static-only]
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

README_MAX_LINES = 250
TWO_COMMANDS = ("bash jobs/quickstart.sh", "bash tests/run.sh")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(.*)$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
ISSUE = re.compile(r"\bissues?\s+#?\d+|\(issues?\b", re.IGNORECASE)
# files outside the repository (the guide is all a reader of a clone has)
OUTSIDE = re.compile(r"\bDESIGN\.md\b|\.\./shared\b|\bshared folder\b")
# a path of the repository named in a code span: `app/train/pipeline.c`
REPO_PATH = re.compile(r"^(?:app|common|kernels|parallel|io|jobs|inputs|tests|docs)/[\w./-]*$")
TESTED_COMMENT = re.compile(r"^\s*<!--\s*tested(\s+exit=(\d+))?\s*-->\s*$")


class Block:
    def __init__(self, path, line, text, exit_code):
        self.path, self.line, self.text, self.exit_code = path, line, text, exit_code


def parse(path):
    """Return (prose lines with their numbers, tested blocks, heading texts)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    prose, blocks, headings = [], [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            h = HEADING.match(lines[i])
            if h:
                headings.append(h.group(2))
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).split()
        start = i
        body = []
        i += 1
        while i < len(lines):
            c = re.match(r"^\s*(`{3,}|~{3,})\s*$", lines[i])
            if c and c.group(1)[0] == fence[0] and len(c.group(1)) >= len(fence):
                break
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1  # past the closing fence (or the end of the file)
        exit_code = None
        if "tested" in info[1:] or (info and info[0] == "tested"):
            exit_code = 0
            for word in info:
                if word.startswith("exit="):
                    exit_code = int(word[5:])
        else:
            k = start - 1
            while k >= 0 and lines[k].strip() == "":
                k -= 1
            t = TESTED_COMMENT.match(lines[k]) if k >= 0 else None
            if t:
                exit_code = int(t.group(2)) if t.group(2) else 0
        if exit_code is not None:
            blocks.append(Block(path, start + 1, "\n".join(body) + "\n", exit_code))
    return prose, blocks, headings


def slugs(headings):
    """GitHub's heading ids: lower case, punctuation dropped, spaces to '-',
    repeats numbered -1, -2, ..."""
    seen, out = {}, set()
    for h in headings:
        text = re.sub(r"<[^>]+>", "", h).replace("`", "")
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
        s = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def static_checks(root, files, parsed):
    errors = []
    rel = lambda p: os.path.relpath(p, root)
    readme = os.path.join(root, "README.md")
    text = open(readme, encoding="utf-8").read()
    nlines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if nlines >= README_MAX_LINES:
        errors.append(f"README.md:{nlines}: README.md has {nlines} lines; keep it under "
                      f"{README_MAX_LINES} and move detail into docs/")
    for cmd in TWO_COMMANDS:
        if not re.search(r"^" + re.escape(cmd) + r"(\s|$)", text, re.MULTILINE):
            errors.append(f"README.md:1: README.md does not show the command '{cmd}'")

    anchors = {p: slugs(parsed[p][2]) for p in files}
    linked = set()
    for p in files:
        base = os.path.dirname(p)
        for n, line in parsed[p][0]:
            for m in ISSUE.finditer(line):
                errors.append(f"{rel(p)}:{n}: issue number in user documentation: "
                              f"'{m.group(0)}' (name the feature instead)")
            for m in OUTSIDE.finditer(line):
                errors.append(f"{rel(p)}:{n}: '{m.group(0)}' is outside the repository: "
                              f"link the document of docs/ that says it")
            for m in CODE_SPAN.finditer(line):
                span = m.group(2).strip()
                if REPO_PATH.match(span) and not os.path.exists(os.path.join(root, span)):
                    errors.append(f"{rel(p)}:{n}: `{span}` does not exist in the repository")
            plain = CODE_SPAN.sub(lambda m: "x" * len(m.group(0)), line)
            targets = [m.group(1) for m in LINK.finditer(plain)]
            r = REF_LINK.match(plain)
            if r:
                targets.append(r.group(1))
            for t in targets:
                if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t):
                    continue  # http:, https:, mailto:
                path, _, anchor = t.partition("#")
                target = os.path.normpath(os.path.join(base, path)) if path else p
                if not os.path.exists(target):
                    errors.append(f"{rel(p)}:{n}: link to '{t}': {rel(target)} does not exist")
                    continue
                if p == readme:
                    linked.add(target)
                if anchor and target.endswith(".md"):
                    if target not in anchors:
                        _, _, heads = parse(target)
                        anchors[target] = slugs(heads)
                    if anchor not in anchors[target]:
                        errors.append(f"{rel(p)}:{n}: link to '{t}': no heading "
                                      f"'#{anchor}' in {rel(target)}")
        # the issue check covers code blocks too
        for b in parsed[p][1]:
            for k, line in enumerate(b.text.split("\n")):
                for m in ISSUE.finditer(line):
                    errors.append(f"{rel(p)}:{b.line + 1 + k}: issue number in user "
                                  f"documentation: '{m.group(0)}'")
    errors += parts_check(root)
    errors += quoted_decks(root, files)
    errors += tables(root, files)
    for p in files:
        if p != readme and p not in linked:
            errors.append(f"README.md:1: README.md does not link the chapter {rel(p)}")
    return errors


def quoted_decks(root, files):
    """A deck a document shows "in full" (`inputs/X.yaml` in full: then a
    yaml block) is the file, byte for byte."""
    errors = []
    pat = re.compile(r"`(inputs/[^`]+\.ya?ml)` in full:\s*\n\s*\n```yaml\n(.*?)```", re.S)
    for p in files:
        text = open(p, encoding="utf-8").read()
        for m in pat.finditer(text):
            n = text.count("\n", 0, m.start()) + 1
            f = os.path.join(root, m.group(1))
            want = open(f, encoding="utf-8").read() if os.path.exists(f) else None
            if want != m.group(2):
                errors.append(f"{os.path.relpath(p, root)}:{n}: the block shown as "
                              f"`{m.group(1)}` in full differs from the file")
    return errors


def tables(root, files):
    """Every row of a Markdown table has the header's number of cells (an
    unescaped | inside a cell, even in a code span, splits it)."""
    errors = []
    cells = lambda line: len(re.findall(r"(?<!\\)\|", line))
    for p in files:
        head = None
        fence = False
        for n, line in enumerate(open(p, encoding="utf-8"), 1):
            if line.startswith("```"):
                fence = not fence
            if fence or not line.startswith("|"):
                head = None
                continue
            if head is None:
                head = cells(line)
            elif cells(line) != head:
                errors.append(f"{os.path.relpath(p, root)}:{n}: a table row with "
                              f"{cells(line) - 1} cells under a header of {head - 1} (escape a "
                              f"| inside a cell as \\|)")
    return errors


def parts_check(root):
    """docs/architecture.md lists the parts in the order tests/unit/layering.py
    enforces."""
    doc = os.path.join(root, "docs", "architecture.md")
    lay = os.path.join(root, "tests", "unit", "layering.py")
    text = open(lay, encoding="utf-8").read()
    m = re.search(r"^PARTS = \[(.*?)\]", text, re.S | re.M)
    want = re.findall(r'"([^"]+)"', m.group(1)) if m else []
    got = []
    for line in open(doc, encoding="utf-8"):
        r = re.match(r"^\| `([a-z/]+?)/?` \|", line)
        if r:
            got.append(r.group(1))
    if not want or got != want:
        return [f"docs/architecture.md:1: the table of parts lists {got}, but "
                f"tests/unit/layering.py enforces {want}"]
    return []


def run_blocks(root, trident, mpiexec, work, path, blocks, timeout):
    """Run one file's tested blocks in order; return the failures."""
    name = os.path.relpath(path, root)
    scratch = os.path.join(work, name.replace("/", "_").replace(".md", ""))
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(os.path.join(scratch, "build"))
    shutil.copytree(os.path.join(root, "inputs"), os.path.join(scratch, "inputs"))
    os.symlink(trident, os.path.join(scratch, "build", "trident"))
    os.symlink(os.path.join(root, "jobs"), os.path.join(scratch, "jobs"))
    bindir = os.path.join(work, ".bin")
    env = dict(os.environ)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("HWLOC_PLUGINS_BLACKLIST", "hwloc_pci")
    failures = []
    for b in blocks:
        where = f"{name}:{b.line}"
        if failures:
            print(f"skip {where} (an earlier block of {name} failed)")
            continue
        t0 = time.time()
        proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", b.text], cwd=scratch,
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            rc = None
        dt = time.time() - t0
        out = out.decode("utf-8", "replace")
        if rc == b.exit_code:
            print(f"ok   {where} ({dt:.1f} s)")
            continue
        why = f"timed out after {timeout} s" if rc is None else \
            f"exit {rc}, expected {b.exit_code}"
        print(f"FAIL {where}: the block {why} (run in {scratch})")
        for line in b.text.rstrip("\n").split("\n"):
            print(f"     $ {line}")
        tail = out.rstrip("\n").split("\n")[-40:]
        for line in tail:
            print(f"     | {line}")
        failures.append(f"{where}: {why}")
    return failures


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trident", required=True)
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec") or "mpiexec")
    ap.add_argument("--root", default=os.path.normpath(os.path.join(here, "..", "..")))
    ap.add_argument("--work", default=None)
    ap.add_argument("--file", action="append", default=[],
                    help="run the tested blocks of this file only (the static checks run always)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per block")
    ap.add_argument("--static-only", action="store_true")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    trident = os.path.abspath(a.trident)
    if not os.access(trident, os.X_OK):
        print(f"FAIL {trident} is not an executable", file=sys.stderr)
        return 2
    mpiexec = shutil.which(a.mpiexec) or a.mpiexec
    docs = os.path.join(root, "docs")
    files = [os.path.join(root, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    parsed = {p: parse(p) for p in files}

    errors = static_checks(root, files, parsed)
    for e in errors:
        print(f"FAIL {e}")
    nblocks = sum(len(parsed[p][1]) for p in files)
    print(f"{'ok  ' if not errors else 'FAIL'} static checks: {len(files)} files, "
          f"{len(errors)} problems; {nblocks} tested blocks")

    failures = []
    if not a.static_only:
        work = os.path.abspath(a.work or os.path.join(root, "build", "tests", "docs"))
        bindir = os.path.join(work, ".bin")
        shutil.rmtree(bindir, ignore_errors=True)
        os.makedirs(bindir)
        os.symlink(trident, os.path.join(bindir, "trident"))
        # wrappers, not links: MPICH's hydra looks for its proxy beside argv[0]
        for launcher in ("mpiexec", "mpirun"):
            w = os.path.join(bindir, launcher)
            with open(w, "w") as f:
                f.write(f'#!/bin/sh\nexec "{mpiexec}" "$@"\n')
            os.chmod(w, 0o755)
        only = {os.path.normpath(os.path.join(root, f)) for f in a.file}
        for p in files:
            if parsed[p][1] and (not only or p in only):
                failures += run_blocks(root, trident, mpiexec, work, p, parsed[p][1], a.timeout)
    n = len(errors) + len(failures)
    print(f"{n} problem{'s' if n != 1 else ''}" + (":" if n else ""))
    for f in errors + failures:
        print(f"  {f}")
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main())
