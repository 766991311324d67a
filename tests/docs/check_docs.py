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
            docs/*.md's sh blocks are parsed the same way, with two more
            rules: a synopsis line (placeholders such as [--opt X|Y], CK,
            FILE.json) only has each of its --options looked up in
            `segtrain SUBCOMMAND --help`; other programs (DOC_PROGRAMS:
            curl, tensorboard, torchrun's wrapper of segtrain...) are not
            checked, except the segtrain command torchrun runs.
  run       README.md's sh commands RUN, in order, verbatim, in a scratch
            directory laid out as a fresh checkout (configs/, scripts/demo,
            ./segtrain linked to the built binary; `segtrain` on PATH), each
            expected to exit 0. The only changes, so that they fit a test:
            - SHRINK: `train` (or the default command) gets
              --set train.iters=10 appended (the last --set wins);
              scripts/demo runs with SEGTRAIN_NO_BUILD=1 (the binary is
              built) and SEGTRAIN_DEMO_SET=train.iters=20;
            - a .pth file named on the line and not there (a download, such
              as torchvision's resnet50-0676ba61.pth) is first copied from
              tests/fixtures/pth/state_dict.pth, a torch.save zip file of the
              same kind (a state dict);
            - a command whose --set data.root= is an absolute path (the
              user's own dataset, e.g. /data/cityscapes) is not run: the
              `commands` check parses it;
            - scripts/test is not run (it is the test suite itself).
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
import shutil
import subprocess
import sys
import tempfile
import time

# Documents that other work adds; a link to one of them is accepted while
# it is missing (the list is emptied once they exist).
PENDING = set()

LAUNCH_OPTS = {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr",
               "--master-port", "--kill-grace-s", "--max-restarts", "--restart-backoff-s",
               "--agent-port", "--node-timeout-s"}
# programs of docs/*.md examples that this checker does not run or parse
DOC_PROGRAMS = {"curl", "tensorboard", "pip", "python3", "export", "openssl"}
SHRINK = ["--set", "train.iters=10"]
PTH_FIXTURE = "tests/fixtures/pth/state_dict.pth"
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


def is_synopsis(words):
    """A usage line: [optional parts], X|Y choices or CAPITAL placeholders."""
    return any(w.startswith("[") or w.endswith("]") and "[" not in w or "|" in w
               or re.match(r"^[A-Z][A-Z_]*(\.[a-z]+)?$", w) for w in words[1:])


def check_synopsis(words, seg, where):
    """Each --option of a usage line is one the subcommand (or launcher) knows."""
    rest = [w.strip("[]") for w in words[1:]]
    sub = next((w for w in rest if w in SUBCOMMANDS), None)
    if sub is None:
        problem(f"{where}: no subcommand in the usage line")
        return
    fmt = rest[rest.index("--format"):rest.index("--format") + 2] if "--format" in rest else []
    r = subprocess.run([seg, sub] + fmt + ["--help"], capture_output=True, text=True, timeout=60)
    helptext = r.stdout + r.stderr
    for w in rest:
        for opt in re.findall(r"--[a-z][a-z0-9-]*", w):
            if opt not in LAUNCH_OPTS and opt not in helptext:
                problem(f"{where}: `segtrain {sub} --help` does not know {opt}")


def commands_of(src, doc):
    """The logical lines of doc's sh code blocks."""
    text = open(os.path.join(src, doc)).read()
    for lang, lines in code_blocks(text):
        if lang in ("sh", "bash", "shell"):
            yield from logical_lines(lines)


def check_commands(seg, src):
    docs = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(src, "docs"))
                                  if f.endswith(".md"))
    n = 0
    with tempfile.TemporaryDirectory(prefix="sg_docs_") as tmp:
        os.symlink(os.path.join(src, "configs"), os.path.join(tmp, "configs"))
        for doc in docs:
            readme = doc == "README.md"
            for line, hname, htext in commands_of(src, doc):
                where = f"{doc}: {line.strip()[:80]}"
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
                if prog == "torchrun" and "--no_python" in words:
                    words = words[words.index("--no_python") + 1:]  # the command it runs
                    prog = words[0] if words else ""
                if prog in ("./segtrain", "segtrain"):
                    if not readme and is_synopsis(words):
                        check_synopsis(words, seg, where)
                    else:
                        check_segtrain(words, seg, tmp, where)
                elif not readme and prog in DOC_PROGRAMS:
                    pass
                elif prog.startswith("scripts/"):
                    path = os.path.join(src, prog)
                    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                        problem(f"{where}: {prog} is not an executable file of the checkout")
                else:
                    problem(f"{where}: the checker has no rule for '{prog}' "
                            "(tests/docs/check_docs.py)")
    print(f"checked {n} commands of README.md and docs/*.md")
    if n == 0:
        problem("README.md: no commands found in its sh code blocks")


def run_commands(seg, src):
    """The `run` check: README.md's commands in order (see the module doc)."""
    n = 0
    with tempfile.TemporaryDirectory(prefix="sg_docs_run_") as tmp:
        os.symlink(os.path.join(src, "configs"), os.path.join(tmp, "configs"))
        os.mkdir(os.path.join(tmp, "scripts"))
        os.symlink(os.path.join(src, "scripts", "demo"), os.path.join(tmp, "scripts", "demo"))
        bindir = os.path.join(tmp, "build")
        os.mkdir(bindir)
        os.symlink(seg, os.path.join(bindir, "segtrain"))
        os.symlink("build/segtrain", os.path.join(tmp, "segtrain"))
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
                   SEGTRAIN_NO_BUILD="1", SEGTRAIN_DEMO_SET="train.iters=20")
        for line, hname, htext in commands_of(src, "README.md"):
            if hname:
                with open(os.path.join(tmp, hname), "w") as f:
                    f.write(htext)
                continue
            code = line.split(" #", 1)[0].strip()
            if not code or code.startswith("#"):
                continue
            words = shlex.split(code)
            where = f"README.md: {code[:80]}"
            if words[0] == "scripts/test":
                continue
            if any(re.match(r"^data\.root=/", w) for w in words):
                print(f"not run (the user's own dataset): {code[:80]}")
                continue
            for w in words:
                if w.endswith(".pth") and not os.path.exists(os.path.join(tmp, w)):
                    shutil.copy(os.path.join(src, PTH_FIXTURE), os.path.join(tmp, w))
            if words[0] in ("./segtrain", "segtrain"):
                sub = next((w for w in words[1:] if w in SUBCOMMANDS), "train")
                if sub == "train":
                    code += " " + " ".join(SHRINK)
            t0 = time.time()
            r = subprocess.run(["bash", "-c", code], cwd=tmp, env=env, capture_output=True,
                               text=True, timeout=300)
            n += 1
            print(f"ran in {time.time() - t0:5.1f} s, exit {r.returncode}: {code[:100]}",
                  flush=True)
            if r.returncode != 0:
                problem(f"{where}: exited {r.returncode} (run as `{code}` in a fresh "
                        f"checkout): {(r.stderr or r.stdout).strip()[-800:]}")
    print(f"ran {n} commands of README.md")
    if n == 0:
        problem("README.md: no commands run")


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
    if len(sys.argv) != 4 or sys.argv[3] not in ("commands", "run", "links", "length"):
        sys.exit(__doc__)
    seg, src, what = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
    {"commands": lambda: check_commands(seg, src), "run": lambda: run_commands(seg, src),
     "links": lambda: check_links(src),
     "length": lambda: check_length(src)}[what]()
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
