#!/usr/bin/python3
"""rewrite.py — turn a CUDA source (.cu, .cuh) into C++ for the emulated
device of tests/cudaemu, at build time. Two constructs g++ cannot take are
rewritten, everything else is copied as is (line numbers are kept, and a
#line directive names the original file, so diagnostics, __FILE__ and
__LINE__ point at it):

  kernel<<<grid, block[, shmem[, stream]]>>>(args);
    -> ::cudaemu::launch(__FILE__, __LINE__, "kernel", grid, block, shmem,
           stream, [](auto... cudaemu_a) { kernel(cudaemu_a...); }, args);
     (a generic lambda: template kernels deduce their arguments as with
     <<<>>>; the arguments are evaluated at the launch.)
  __shared__ T name[dims];            (in a function: static shared memory)
    -> static char cudaemu_shared_name_L; auto &name =
           ::cudaemu::shared<T[dims]>(&cudaemu_shared_name_L, "name", ...);
     (the address of a function-local static is unique per declaration
     site and per template instantiation: the key of the block's instance.)
  extern __shared__ T name[];         (dynamic shared memory)
    -> T *name = ::cudaemu::dynamic_shared<T>(__FILE__, __LINE__);

Usage: rewrite.py SOURCE OUTPUT. The output is written only when its text
changes. Test code only; a real CUDA build never runs this."""
import os
import re
import sys


class RewriteError(Exception):
    pass


def code_mask(text):
    """A copy of text with comments, string and character literals blanked
    (same length), so that searches see code only."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if text[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def match_forward(mask, pos, open_c, close_c):
    """Index just past the bracket closing the one at pos."""
    depth = 0
    for i in range(pos, len(mask)):
        if mask[i] == open_c:
            depth += 1
        elif mask[i] == close_c:
            depth -= 1
            if depth == 0:
                return i + 1
    raise RewriteError("unbalanced %s" % open_c)


def split_top(mask, text, begin, end):
    """text[begin:end] split at commas outside brackets."""
    parts, depth, start = [], 0, begin
    for i in range(begin, end):
        c = mask[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:end])
    return parts


def kernel_start(mask, pos):
    """Start of the kernel expression ending just before pos: an
    identifier, possibly qualified (a::b), possibly with template
    arguments (k<float, 4>)."""
    i = pos
    while i > 0 and mask[i - 1].isspace():
        i -= 1
    if i > 0 and mask[i - 1] == ">":
        depth = 0
        while i > 0:
            i -= 1
            if mask[i] == ">":
                depth += 1
            elif mask[i] == "<":
                depth -= 1
                if depth == 0:
                    break
        while i > 0 and mask[i - 1].isspace():
            i -= 1
    while i > 0 and (mask[i - 1].isalnum() or mask[i - 1] in "_:"):
        i -= 1
    return i


def rewrite_launches(text, path):
    mask = code_mask(text)
    out, last = [], 0
    for m in re.finditer(r"<<<", mask):
        if m.start() < last:
            continue
        k0 = kernel_start(mask, m.start())
        kernel = text[k0:m.start()].strip()
        if not re.match(r"^[A-Za-z_:][\w:]*(\s*<.*>)?$", kernel, re.S):
            raise RewriteError("%s:%d: cannot read the kernel before <<<" % (path, line_of(text, m.start())))
        close = mask.find(">>>", m.end())
        if close < 0:
            raise RewriteError("%s:%d: <<< without >>>" % (path, line_of(text, m.start())))
        cfg = split_top(mask, text, m.end(), close)
        if not 2 <= len(cfg) <= 4:
            raise RewriteError("%s:%d: a launch configuration of %d values" % (path, line_of(text, m.start()), len(cfg)))
        cfg += ["0"] * (4 - len(cfg))
        p = close + 3
        while p < len(mask) and mask[p].isspace():
            p += 1
        if p >= len(mask) or mask[p] != "(":
            raise RewriteError("%s:%d: no argument list after >>>" % (path, line_of(text, m.start())))
        args_end = match_forward(mask, p, "(", ")")
        args = text[p + 1:args_end - 1]
        name = re.sub(r"\s+", "", kernel.split("<")[0])
        body = "[](auto... cudaemu_a) { %s(cudaemu_a...); }" % kernel
        call = "::cudaemu::launch(__FILE__, __LINE__, \"%s\", %s, %s" % (name, ", ".join(c.strip() for c in cfg), body)
        # the newlines of what is replaced stay, so that later lines keep their numbers
        call += "\n" * text.count("\n", k0, p)
        call += (", " + args if args.strip() else "") + ")"
        out.append(text[last:k0])
        out.append(call)
        last = args_end
    out.append(text[last:])
    return "".join(out)


SHARED = re.compile(
    r"(?P<ext>\bextern\s+)?(?:\bstatic\s+)?__shared__\s+(?P<decl>[^;{}=]*?)\s*;")


def rewrite_shared(text, path):
    mask = code_mask(text)
    out, last = [], 0
    for m in SHARED.finditer(mask):
        decl = text[m.start("decl"):m.end("decl")]
        line = line_of(text, m.start())
        d = re.match(r"^(?P<type>.+?)\s*\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(\[[^\]]*\]\s*)*)$", decl, re.S)
        if not d or "," in decl:
            raise RewriteError("%s:%d: cannot rewrite '__shared__ %s' (one variable a declaration)" % (path, line, decl))
        ty, name, dims = d.group("type").strip(), d.group("name"), re.sub(r"\s+", "", d.group("dims"))
        if m.group("ext"):
            if dims != "[]":
                raise RewriteError("%s:%d: extern __shared__ must be an unsized array" % (path, line))
            repl = "%s *%s = ::cudaemu::dynamic_shared<%s>(__FILE__, __LINE__);" % (ty, name, ty)
        else:
            key = "cudaemu_shared_%s_%d" % (name, line)
            repl = ("static char %s; auto &%s = ::cudaemu::shared<%s%s>(&%s, \"%s\", __FILE__, __LINE__);"
                    % (key, name, ty, dims, key, name))
        repl += "\n" * text.count("\n", m.start(), m.end())
        out.append(text[last:m.start()])
        out.append(repl)
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: rewrite.py SOURCE OUTPUT\n")
        return 2
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    try:
        body = rewrite_shared(rewrite_launches(text, src), src)
    except RewriteError as e:
        sys.stderr.write("rewrite.py: %s\n" % e)
        return 1
    result = "#line 1 \"%s\"\n%s" % (os.path.abspath(src), body)
    if os.path.exists(dst):
        with open(dst, encoding="utf-8") as f:
            if f.read() == result:
                return 0
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    tmp = dst + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(result)
    os.replace(tmp, dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
