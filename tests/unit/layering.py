#!/usr/bin/env python3
"""layering.py — the layers and the parts of app/ point one way
(docs/architecture.md, "Layers and parts").

Three checks, each over the whole source tree (common/ kernels/ parallel/
io/ app/):

1. Includes between parts: a file of part P may include a header of part Q
   only when Q comes before P in PARTS (or Q is P). The order is the one
   docs/architecture.md lists; the docs test checks that the document's list
   is this one.
2. No include circle: the graph of project headers including project
   headers has no cycle (a header guard would hide one from the compiler).
3. No call circle between objects of app/: with OBJDIR (the build's
   CMakeFiles/tdcore.dir), an object that uses a symbol another object of
   app/ defines is an edge; the graph of app/'s objects has no cycle (so
   no two files call each other, as app/pipeline.c and app/trainer.c once
   did), and no edge goes from an earlier part to a later one.

usage: layering.py SRCDIR [OBJDIR]    exit 0: clean; 1: violations listed
"""
import os
import re
import subprocess
import sys

# lowest first: each may use those before it, never those after
PARTS = [
    "common",
    "kernels",
    "parallel",
    "io",
    "app/deck",
    "app/model",
    "app/train",
    "app/plan",
    "app/cli",
]
EXTS = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def part_of(rel):
    best = None
    for p in PARTS:
        if rel == p or rel.startswith(p + "/"):
            if best is None or len(p) > len(best):
                best = p
    return best


def sources(src):
    out = []
    for top in ("common", "kernels", "parallel", "io", "app"):
        for d, _, files in os.walk(os.path.join(src, top)):
            for f in files:
                if f.endswith(EXTS):
                    out.append(os.path.relpath(os.path.join(d, f), src))
    return sorted(out)


def resolve(src, rel, inc):
    """The project file an include names (None: a system or generated header)."""
    for cand in (inc, os.path.join("common", inc), os.path.join(os.path.dirname(rel), inc)):
        if os.path.isfile(os.path.join(src, cand)):
            return os.path.normpath(cand)
    return None


def find_cycle(graph):
    """One cycle of graph (node -> set of nodes) as a list, or None."""
    color, stack = {}, []

    def visit(n):
        color[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if color.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if not color.get(m):
                c = visit(m)
                if c:
                    return c
        stack.pop()
        color[n] = 2
        return None

    for n in sorted(graph):
        if not color.get(n):
            c = visit(n)
            if c:
                return c
    return None


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    src = sys.argv[1]
    objdir = sys.argv[2] if len(sys.argv) == 3 else None
    bad = []
    files = sources(src)
    rank = {p: i for i, p in enumerate(PARTS)}
    incs = {}
    for rel in files:
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            text = f.read()
        incs[rel] = set()
        for inc in INCLUDE.findall(text):
            tgt = resolve(src, rel, inc)
            if tgt is None:
                continue
            incs[rel].add(tgt)
            a, b = part_of(rel), part_of(tgt)
            if a is None or b is None:
                bad.append(f"{rel}: includes {inc}, outside the layers")
            elif rank[b] > rank[a]:
                bad.append(f"{rel} ({a}) includes {tgt} ({b}): {b} comes after {a}")
    headers = {r: {t for t in incs[r] if t.endswith((".h", ".cuh"))}
               for r in incs if r.endswith((".h", ".cuh"))}
    cyc = find_cycle(headers)
    if cyc:
        bad.append("include circle: " + " -> ".join(cyc))
    nobj = 0
    if objdir:
        defs, uses = {}, {}
        for d, _, fs in os.walk(os.path.join(objdir, "app")):
            for f in fs:
                if not f.endswith(".o"):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, objdir)[: -len(".o")]
                out = subprocess.run(["nm", path], capture_output=True, text=True,
                                     check=True).stdout
                defs[rel], uses[rel] = set(), set()
                for line in out.splitlines():
                    parts = line.split()
                    if len(parts) == 3 and parts[1] in "TDBR":
                        defs[rel].add(parts[2])
                    elif len(parts) == 2 and parts[0] == "U":
                        uses[rel].add(parts[1])
        nobj = len(defs)
        owner = {s: o for o, ss in defs.items() for s in ss}
        calls = {o: {owner[s] for s in uses[o] if s in owner and owner[s] != o} for o in defs}
        for o, ts in calls.items():
            for t in ts:
                a, b = part_of(o), part_of(t)
                if a and b and rank[b] > rank[a]:
                    syms = sorted(s for s in uses[o] if owner.get(s) == t)
                    bad.append(f"{o} ({a}) calls {t} ({b}): {', '.join(syms[:4])}")
        cyc = find_cycle(calls)
        if cyc:
            bad.append("call circle between objects: " + " -> ".join(cyc))
        if nobj == 0:
            bad.append(f"{objdir}: no objects of app/ found (build first)")
    for b in bad:
        print("layering:", b)
    print(f"layering: {len(files)} files, {sum(len(v) for v in incs.values())} includes, "
          f"{nobj} objects of app/ checked: {'FAILED' if bad else 'one way, no circle'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
