"""The docs run: every example in README.md and docs/ is executed or checked here.

The convention (each item is one test, named by its file and line):

- `<!-- file: examples/docs/NAME.py -->` right before a fenced block: the block's text equals
  the file's text. `<!-- excerpt: examples/docs/NAME.py -->`: the block's lines appear, in
  order and together, in that file (a few lines shown out of a whole script).
- `<!-- run: COMMAND -->` (anywhere, several allowed): run from the repository root with the
  project's interpreter, `python`, `torchrun` and `laggard` on PATH; it must exit 0.
  `<!-- expect: REGEX -->` right after a run line: its stdout+stderr must match REGEX.
- ```sh blocks run in order, per page, in one temporary directory (which holds links to the
  repository's examples/, tests/, docs/, deploy/, bench/, python/ and scripts/, so that commands
  read as they would from a checkout); ```python blocks that are not files run as given, each in
  its own temporary directory. `<!-- not-run: REASON -->` before a block skips it; REASON starts
  with one of: install, GPU, multi-node, interactive. Lines starting with `$ ` are an error in a
  ```sh block: commands are written plain, output goes into a ```text block. A ```sh block
  right after `<!-- run: -->` lines shows the command they run and is not run a second time.
- Every relative link in README.md and docs/**/*.md resolves to an existing file.

docs/notes/ (engineering notes: dated runs) is link-checked, not run.
Run only this: PYTHONPATH=python .venv/bin/python -m pytest tests/python/test_docs.py -q
Without the slow ones (real rank processes): ... -m "not multiproc"
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

import testenv

ROOT = testenv.ROOT
ALLOWED_NOT_RUN = ("install", "gpu", "multi-node", "interactive")
# Commands that start rank processes (a launcher, Lightning's own with --devices N, a script that
# calls mpirun): marked `multiproc`, so that scripts/test.sh runs them one at a time.
SLOW = re.compile(r"\b(torchrun|mpirun|mpiexec|laggard demo|laggard\.demo|laggard launch|"
                  r"laggard\.launch|nproc|cpp_mpi\.sh)\b|--devices [2-9]")
RUN_TIMEOUT = 300      # one run command or page (several ranks on a busy 2-core machine)
LINKED = ("examples", "tests", "docs", "deploy", "bench", "python", "scripts")


def _pages():
    pages = [os.path.join(ROOT, "README.md")]
    pages += sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return [p for p in pages if os.path.isfile(p)]


def _rel(path):
    return os.path.relpath(path, ROOT)


def _is_run_page(path):
    return not _rel(path).startswith(os.path.join("docs", "notes") + os.sep)


class Block(object):
    def __init__(self, page, line, lang, text, directives):
        self.page, self.line, self.lang, self.text = page, line, lang, text
        self.directives = directives  # [(kind, value)] of the comment lines right before it

    def directive(self, kind):
        for k, v in self.directives:
            if k == kind:
                return v
        return None

    def id(self):
        return "%s:%d" % (_rel(self.page), self.line)


DIRECTIVE = re.compile(r"^\s*<!--\s*([a-z-]+):\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^( {0,3}|\s*)(`{3,}|~{3,})\s*([^\s`]*)")


def parse(page):
    """The fenced blocks of a page, with the directive lines right before each, and every
    `run:` directive of the page with its `expect:` lines ((line, command, [regex]))."""
    with open(page, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, runs = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        d = DIRECTIVE.match(lines[i])
        if d and d.group(1) == "run":
            runs.append([i + 1, d.group(2), []])
        elif d and d.group(1) == "expect" and runs and _only_directives(lines, runs[-1][0], i):
            runs[-1][2].append(d.group(2))
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines):
            s = lines[i]
            if s.strip().startswith(fence[0] * len(fence)) and s.strip().strip(fence[0]) == "":
                break
            body.append(s[indent:] if s[:indent].strip() == "" else s)
            i += 1
        directives = []
        j = start - 1
        while j >= 0 and (lines[j].strip() == "" or DIRECTIVE.match(lines[j])):
            dm = DIRECTIVE.match(lines[j])
            if dm:
                directives.append((dm.group(1), dm.group(2)))
            j -= 1
        blocks.append(Block(page, start + 1, lang, "\n".join(body) + "\n", directives[::-1]))
        i += 1
    return blocks, [tuple(r) for r in runs]


def _only_directives(lines, run_line, i):
    """True when lines run_line..i-1 (1-based run_line) are directives or blank."""
    return all(lines[k].strip() == "" or DIRECTIVE.match(lines[k])
               for k in range(run_line, i))


PAGES = _pages()
PARSED = {p: parse(p) for p in PAGES}


def _blocks(pred):
    out = []
    for p in PAGES:
        for b in PARSED[p][0]:
            if pred(b):
                out.append(b)
    return out


def _env(tmp):
    """The environment of a doc command: the project's interpreter first on PATH (python,
    torchrun), `laggard` from a directory of its own, the package importable."""
    bindir = os.path.join(tmp, ".doc-bin")
    os.makedirs(bindir, exist_ok=True)
    cli = testenv.cli()
    if cli is not None and not os.path.exists(os.path.join(bindir, "laggard")):
        os.symlink(cli, os.path.join(bindir, "laggard"))
    pybin = os.path.dirname(sys.executable)
    env = testenv.subprocess_env(OMP_NUM_THREADS="1", TMPDIR=tmp)
    env["PATH"] = os.pathsep.join([bindir, pybin, env.get("PATH", "")])
    env.pop("LAGGARD_EXAMPLE_SLOW_RANK", None)
    return env


def _workdir(tmp):
    for name in LINKED:
        src = os.path.join(ROOT, name)
        if os.path.exists(src) and not os.path.exists(os.path.join(tmp, name)):
            os.symlink(src, os.path.join(tmp, name))


def _marks(text):
    return [pytest.mark.multiproc] if SLOW.search(text) else []


def _not_run(block):
    reason = block.directive("not-run")
    if reason is None:
        return None
    assert reason.lower().startswith(ALLOWED_NOT_RUN), (
        "%s: not-run reason %r: allowed are %s" % (block.id(), reason, ", ".join(ALLOWED_NOT_RUN)))
    return reason


def _show(r):
    out = (r.stdout or "") + (r.stderr or "")
    return out[-6000:]


# ---- file: and excerpt: blocks ----------------------------------------------------------------

FILE_BLOCKS = _blocks(lambda b: b.directive("file") or b.directive("excerpt"))


@pytest.mark.parametrize("block", FILE_BLOCKS, ids=[b.id() for b in FILE_BLOCKS])
def test_file_block_matches(block):
    name = block.directive("file") or block.directive("excerpt")
    path = os.path.join(ROOT, name)
    assert os.path.isfile(path), "%s: %s does not exist" % (block.id(), name)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if block.directive("file"):
        assert block.text == text, ("%s: the block differs from %s (copy the file into the page)"
                                    % (block.id(), name))
    else:
        want = "\n".join(s.rstrip() for s in block.text.strip("\n").split("\n"))
        have = "\n".join(s.rstrip() for s in text.split("\n"))
        assert want in have, "%s: the excerpt is not in %s" % (block.id(), name)


# ---- run: commands ----------------------------------------------------------------------------

RUNS = [(p, line, cmd, expect) for p in PAGES if _is_run_page(p) for line, cmd, expect in
        PARSED[p][1]]


@pytest.mark.parametrize(
    "page,line,cmd,expect",
    [pytest.param(*r, marks=_marks(r[2]), id="%s:%d" % (_rel(r[0]), r[1])) for r in RUNS])
def test_run_command(page, line, cmd, expect, tmp_path):
    if testenv.cli() is None and re.search(r"(^|[;&|]\s*)laggard\s", cmd):
        pytest.skip("no `laggard` program (build the laggard target)")
    if re.search(r"mpirun|cpp_mpi", cmd) and shutil.which("mpirun") is None:
        pytest.skip("no mpirun (MPI is optional: the C++ MPI example is built only with it)")
    r = subprocess.run(cmd, shell=True, cwd=ROOT, env=_env(str(tmp_path)),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       timeout=RUN_TIMEOUT, executable="/bin/bash")
    where = "%s:%d: %s" % (_rel(page), line, cmd)
    assert r.returncode == 0, "%s exited %d\n%s" % (where, r.returncode, _show(r))
    for rx in expect:
        assert re.search(rx, r.stdout + r.stderr, re.M), (
            "%s: the output does not match %r\n%s" % (where, rx, _show(r)))


# ---- ```sh blocks, per page ---------------------------------------------------------------------

def _sh_blocks(page):
    return [b for b in PARSED[page][0]
            if b.lang in ("sh", "bash", "shell") and not b.directive("file")
            and not b.directive("excerpt")]


SH_PAGES = [p for p in PAGES if _is_run_page(p) and _sh_blocks(p)]


@pytest.mark.parametrize(
    "page", [pytest.param(p, marks=_marks("".join(b.text for b in _sh_blocks(p)
                                                  if b.directive("not-run") is None)),
                          id=_rel(p)) for p in SH_PAGES])
def test_sh_blocks(page, tmp_path):
    tmp = str(tmp_path)
    _workdir(tmp)
    env = _env(tmp)
    ran = 0
    for b in _sh_blocks(page):
        dollar = [s for s in b.text.split("\n") if s.startswith("$ ")]
        assert not dollar, ("%s: a ```sh block holds commands only (no '$ '; output goes into a "
                            "```text block): %r" % (b.id(), dollar[0]))
        if _not_run(b) is not None or b.directive("run") is not None:
            continue  # a block right after run: lines shows what they run (test_run_command)
        if testenv.cli() is None and re.search(r"\blaggard\b", b.text):
            pytest.skip("no `laggard` program (build the laggard target)")
        r = subprocess.run(["/bin/bash", "-e", "-o", "pipefail", "-c", b.text], cwd=tmp, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=RUN_TIMEOUT)
        assert r.returncode == 0, "%s: the block exited %d\n%s\n%s" % (
            b.id(), r.returncode, b.text, _show(r))
        ran += 1
    if ran == 0:
        pytest.skip("no ```sh block of %s to run here: each is marked not-run or shows the "
                    "command of its run: lines" % _rel(page))


# ---- ```python blocks that are not files -----------------------------------------------------

PY_BLOCKS = [b for b in _blocks(lambda b: b.lang in ("python", "py") and not b.directive("file")
                                and not b.directive("excerpt")) if _is_run_page(b.page)]


@pytest.mark.parametrize("block", [pytest.param(b, marks=_marks(b.text), id=b.id())
                                   for b in PY_BLOCKS])
def test_python_block(block, tmp_path):
    if _not_run(block) is not None:
        pytest.skip(block.directive("not-run"))
    tmp = str(tmp_path)
    _workdir(tmp)
    script = os.path.join(tmp, "doc_block.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(block.text)
    r = subprocess.run([sys.executable, script], cwd=tmp, env=_env(tmp), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=RUN_TIMEOUT)
    assert r.returncode == 0, "%s: the block exited %d (a ```python block must be complete, or "\
        "a file: or excerpt: block)\n%s" % (block.id(), r.returncode, _show(r))


# ---- every not-run reason is one of the allowed ones -------------------------------------------

NOT_RUN = _blocks(lambda b: b.directive("not-run") is not None)


@pytest.mark.parametrize("block", NOT_RUN, ids=[b.id() for b in NOT_RUN])
def test_not_run_reason_is_allowed(block):
    _not_run(block)


# ---- links --------------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _links(page):
    """(line, target) of every relative Markdown link outside fenced blocks."""
    out = []
    infence = None
    with open(page, encoding="utf-8") as f:
        for n, s in enumerate(f, 1):
            m = FENCE.match(s)
            if m:
                if infence is None:
                    infence = m.group(2)[0]
                elif s.strip().strip(infence) == "":
                    infence = None
                continue
            if infence is not None:
                continue
            for lm in LINK.finditer(re.sub(r"`[^`]*`", "", s)):
                t = lm.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I) or t.startswith("#"):
                    continue
                out.append((n, t))
    return out


@pytest.mark.parametrize("page", PAGES, ids=[_rel(p) for p in PAGES])
def test_relative_links_resolve(page):
    bad = []
    for n, target in _links(page):
        path = target.split("#", 1)[0]
        full = os.path.normpath(os.path.join(os.path.dirname(page), path))
        if not os.path.exists(full):
            bad.append("%s:%d: %s" % (_rel(page), n, target))
    assert not bad, "links to files that do not exist:\n" + "\n".join(bad)


def test_the_harness_finds_the_pages():
    assert os.path.join(ROOT, "README.md") in PAGES
    assert len(PAGES) >= 2
    # the parser itself: a directive, a file block, a run line with its expectation
    with tempfile.TemporaryDirectory() as d:
        page = os.path.join(d, "p.md")
        with open(page, "w") as f:
            f.write("x\n<!-- run: echo hi -->\n<!-- expect: ^hi$ -->\n\n<!-- not-run: install -->\n"
                    "```sh\npip install .\n```\n\n- item\n\n  ```python\n  print(1)\n  ```\n")
        blocks, runs = parse(page)
    assert runs == [(2, "echo hi", ["^hi$"])]
    assert [(b.line, b.lang, b.text, b.directive("not-run")) for b in blocks] == [
        (6, "sh", "pip install .\n", "install"), (12, "python", "print(1)\n", None)]


def test_python_reference_is_current():
    """docs/reference/python.md's API part is what tools/docs/python_reference.py makes from the
    docstrings now (rerun the tool after changing a public signature or docstring)."""
    tool = os.path.join(ROOT, "tools", "docs", "python_reference.py")
    page = os.path.join(ROOT, "docs", "reference", "python.md")
    if not os.path.isfile(tool) or not os.path.isfile(page):
        pytest.skip("no generated Python reference in this tree")
    for name in ("torch", "lightning", "transformers", "megatron.core"):
        pytest.importorskip(name)
    import importlib.util

    spec = importlib.util.spec_from_file_location("python_reference", tool)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    with open(page, encoding="utf-8") as f:
        text = f.read()
    assert gen.render(text) == text, ("docs/reference/python.md is stale: run "
                                      "PYTHONPATH=python python tools/docs/python_reference.py")


def test_the_harness_fails_what_it_should(tmp_path):
    """A run: command that fails, an expect: that does not match, a python block that raises
    and a sh block that fails are failures."""
    page = os.path.join(ROOT, "README.md")
    with pytest.raises(AssertionError, match="exited 3"):
        test_run_command(page, 1, "exit 3", [], tmp_path)
    with pytest.raises(AssertionError, match="does not match"):
        test_run_command(page, 1, "echo hi", ["^bye$"], tmp_path)
    test_run_command(page, 1, "echo hi", ["^hi$"], tmp_path)
    with pytest.raises(AssertionError, match="exited 1"):
        test_python_block(Block(page, 1, "python", "raise SystemExit(1)\n", []), tmp_path)
    fake = str(tmp_path / "fake.md")
    with open(fake, "w") as f:
        f.write("```sh\ntrue\nfalse\n```\n")
    PARSED[fake] = parse(fake)
    try:
        with pytest.raises(AssertionError, match="fake.md:1: the block exited 1"):
            test_sh_blocks(fake, tmp_path)
    finally:
        del PARSED[fake]
