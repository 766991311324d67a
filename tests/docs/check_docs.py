#!/usr/bin/env python3
"""tests/docs/check_docs.py SEGTRAIN SRCDIR CHECK - the documentation works.

CHECK is one of:
  commands  every command in README.md's sh code blocks parses: segtrain
            commands are run with --help (options and their values are
            checked, nothing runs), those with --config also as `segtrain
            config` (the configuration validates), `segtrain config` itself
            as written; a `cat > FILE <<'EOF'` block writes FILE first (in a
            scratch directory where configs/ is the checkout's), scripts/
            must exist and be executable. A line the checker does not know
            is a failure, so a new kind of example gets a rule here.
  links     every relative link of README.md, docs/*.md, docs/lab/*.md and
            tests/README.md names a file of the checkout, and its #anchor a
            heading there.
  length    README.md is at most 150 lines; no "issue N" in README.md,
            docs/ or configs/ (user-facing text names no tracker).
Exits 0 when all is well, 1 naming each problem.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

# Documents that other work adds; a link to one of them is accepted while
# it is missing (the list is emptied once they exist).
PENDING = set()

LAUNCH_OPTS = {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr",
               "--master-port", "--kill-grace-s"}
SUBCOMMANDS = {"train", "eval", "predict", "export", "bench", "synth", "convert",
               "config", "plot"}

problems = []


def problem(msg):
    problems.append(msg)
    print("FAIL: " + msg, flush=True)


def code_blocks(text):
    """(language, [lines]) of each fenced block."""
    blocks, lang, cur = [], None, None
    for line in text.split("\n"):
        m = re.match(r"^```(\w*)\s*$", line)
        if m and cur is None:
            lang, cur = m.group(1), []
        elif line.startswith("```") and cur is not None:
            blocks.append((lang, cur))
            cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


def logical_lines(lines):
    """Joins continuation lines; yields (line, heredoc_name, heredoc_text)."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        m = re.match(r"^cat\s*>\s*(\S+)\s*<<\s*'?(\w+)'?\s*$", line.strip())
        if m:
            name, end, body = m.group(1), m.group(2), []
            i += 1
            while i < len(lines) and lines[i] != end:
                body.append(lines[i])
                i += 1
            out.append((line, name, "\n".join(body) + "\n"))
        else:
            out.append((line, None, None))
        i += 1
    return out


def run(argv, cwd, what):
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        problem(f"{what}: `{' '.join(shlex.quote(a) for a in argv)}` exited "
                f"{r.returncode}: {(r.stderr or r.stdout).strip()[-600:]}")
    return r.returncode == 0


def check_segtrain(words, seg, cwd, where):
    args = words[1:]
    # launcher options (and their values) go to the launcher, not the command
    rest, i = [], 0
    while i < len(args):
        a = args[i]
        name = a.split("=", 1)[0]
        if name in LAUNCH_OPTS:
            i += 1 if "=" in a else 2
            continue
        rest.append(a)
        i += 1
    sub = rest[0] if rest and rest[0] in SUBCOMMANDS else None
    opts = rest[1:] if sub else rest
    if sub is None:
        if any(a.startswith("--config") for a in opts):
            sub = "train"  # options only: train
        elif opts and opts[0] in ("--help", "--version", "--help-config"):
            return run([seg] + opts, cwd, where)
        else:
            problem(f"{where}: no subcommand in `{' '.join(words)}`")
            return False
    if sub == "config":
        return run([seg, "config"] + opts, cwd, where)
    ok = run([seg, sub] + opts + ["--help"], cwd, where + " (options)")
    cfg = [a for a in opts if a.startswith("--config")]
    if cfg and sub in ("train", "bench", "eval", "predict"):
        # the configuration part: --config and every --set
        keep, j = [], 0
        while j < len(opts):
            a = opts[j]
            if a in ("--config", "--set") and j + 1 < len(opts):
                keep += [a, opts[j + 1]]
                j += 2
                continue
            if a.startswith("--config=") or a.startswith("--set="):
                keep.append(a)
            j += 1
        ok = run([seg, "config"] + keep, cwd, where + " (configuration)") and ok
    return ok


def check_commands(seg, src):
    text = open(os.path.join(src, "README.md")).read()
    n = 0
    with tempfile.TemporaryDirectory(prefix="sg_docs_") as tmp:
        os.symlink(os.path.join(src, "configs"), os.path.join(tmp, "configs"))
        for lang, lines in code_blocks(text):
            if lang not in ("sh", "bash", "shell"):
                continue
            for line, hname, htext in logical_lines(lines):
                where = f"README.md: {line.strip()[:80]}"
                if hname:
                    with open(os.path.join(tmp, hname), "w") as f:
                        f.write(htext)
                    n += 1
                    continue
                code = line.split(" #", 1)[0].strip()
                if not code or code.startswith("#"):
                    continue
                try:
                    words = shlex.split(code)
                except ValueError as e:
                    problem(f"{where}: does not parse as shell words: {e}")
                    continue
                n += 1
                prog = words[0]
                if prog in ("./segtrain", "segtrain"):
                    check_segtrain(words, seg, tmp, where)
                elif prog.startswith("scripts/"):
                    path = os.path.join(src, prog)
                    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                        problem(f"{where}: {prog} is not an executable file of the checkout")
                else:
                    problem(f"{where}: the checker has no rule for '{prog}' "
                            "(tests/docs/check_docs.py)")
    print(f"checked {n} commands of README.md")
    if n == 0:
        problem("README.md: no commands found in its sh code blocks")


def slug(heading):
    """GitHub's anchor of a heading."""
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    out, fenced = set(), False
    for line in open(path):
        if line.startswith("```"):
            fenced = not fenced
        m = re.match(r"^(#+)\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            base = slug(m.group(2))
            a, k = base, 1
            while a in out:
                a, k = f"{base}-{k}", k + 1
            out.add(a)
    return out


def check_links(src):
    docs = ["README.md", "tests/README.md"]
    for d in ("docs", "docs/lab"):  # docs/lab: the historical lab notebooks
        if os.path.isdir(os.path.join(src, d)):
            docs += sorted(d + "/" + f for f in os.listdir(os.path.join(src, d))
                           if f.endswith(".md"))
    n = 0
    for doc in docs:
        text = open(os.path.join(src, doc)).read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)  # not in code blocks
        for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            n += 1
            file, _, anchor = target.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(doc), file)) if file else doc
            full = os.path.join(src, path)
            if not os.path.exists(full):
                if path in PENDING:
                    print(f"note: {doc}: link to {path}, which other work adds")
                    continue
                problem(f"{doc}: link '{target}': {path} does not exist")
                continue
            if anchor and path.endswith(".md") and anchor not in anchors(full):
                problem(f"{doc}: link '{target}': {path} has no heading with anchor '#{anchor}'")
    print(f"checked {n} relative links")


def check_length(src):
    n = len(open(os.path.join(src, "README.md")).read().split("\n"))
    if n > 151:
        problem(f"README.md has {n} lines: keep it to about 150 (the rest goes to docs/)")
    r = subprocess.run(["grep", "-rnE", "issue [0-9]", "README.md", "docs", "configs"],
                       cwd=src, capture_output=True, text=True)
    if r.stdout.strip():
        problem("'issue N' in user-facing text (README.md, docs/, configs/):\n" + r.stdout)
    print(f"README.md: {n} lines")


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("commands", "links", "length"):
        sys.exit(__doc__)
    seg, src, what = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
    {"commands": lambda: check_commands(seg, src), "links": lambda: check_links(src),
     "length": lambda: check_length(src)}[what]()
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
