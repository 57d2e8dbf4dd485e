"""The docs are complete in a clone: docs/reference.md is what its generator writes from the
registry, nothing a user reads points to a file outside the repository, and every test file the
docs name exists."""

from __future__ import annotations

import re
from pathlib import Path

from tests.tools import reference

ROOT = Path(__file__).resolve().parents[1]

# what a user of the clone reads: the README, the docs, the code's messages and comments, the
# deployment files and the tests' docstrings (this file names the patterns, so it is left out)
READ = ("README.md", "docs", "service", "engine", "src", "loadtest", "deploy", "tests", "Dockerfile", ".ci")
SELF = Path(__file__).resolve()
SUFFIXES = {".md", ".py", ".c", ".h", ".proto", ".txt", ".yaml", ".yml", ".toml", ".json", ".html"}
# files that lived beside the repository, never in it: the contract now lives in docs/reference.md
OUTSIDE = re.compile(r"\.\./shared|\bshared/(?:API|SEMANTICS|STYLE)|\bAPI\.md\b|\bSEMANTICS\b|\bSTYLE\.md\b")
# a test file the docs or a comment name; a bare name in quotes is a file the code writes, not one
# it names ("test_case.py" in a test of the suite's hooks), while a quoted tests/... path names one
TEST_FILE = re.compile(r"(?<![\w/.*-])(?<![\"'](?=test_))((?:tests/[\w/*]*)?test_[\w*]*\.py)\b")


def read_files():
    for top in READ:
        path = ROOT / top
        for f in [path] if path.is_file() else sorted(path.rglob("*")):
            if (
                f.is_file()
                and (f.suffix in SUFFIXES or f.name in ("Dockerfile", "run"))
                and "__pycache__" not in f.parts
                and f.resolve() != SELF
            ):
                yield f


def test_reference_is_generated_from_the_registry():
    page = (ROOT / "docs" / "reference.md").read_text()
    assert page == reference.render(), (
        "docs/reference.md is stale: .venv/bin/python -m tests.tools.reference > docs/reference.md"
    )


def test_models_page_is_generated_from_the_records():
    from tests.tools import models_doc

    assert (ROOT / "docs" / "models.md").read_text() == models_doc.render(), (
        "docs/models.md is stale: .venv/bin/python -m tests.tools.models_doc"
    )


def test_nothing_points_outside_the_clone():
    found = []
    for f in read_files():
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, (
        "these point to files that are not in the repository; link the right docs/ page "
        "(docs/reference.md holds the contract and the formulas):\n" + "\n".join(found)
    )


def test_named_test_files_exist():
    tests = [p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")]
    missing = []
    for f in read_files():  # the docs, and the code's comments that send a reader to a test
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for name in TEST_FILE.findall(line):
                if "/" in name:
                    pattern = re.escape(name).replace(r"\*", r"[\w]*") + "$"
                else:
                    pattern = r"(^|/)" + re.escape(name).replace(r"\*", r"[\w]*") + "$"
                if not any(re.search(pattern, t) for t in tests):
                    missing.append(f"{f.relative_to(ROOT)}:{n}: {name}")
    assert not missing, "the docs name test files that do not exist:\n" + "\n".join(missing)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_relative_links_in_the_docs_resolve():
    """Every relative link of the README and docs names a file of the clone, and its #anchor a
    heading of that file."""
    link = re.compile(r"\]\(([^)#:\s]*)(?:#([^)\s]*))?\)")
    broken = []
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            for target, anchor in link.findall(line):
                if not target and not anchor:
                    continue
                path = f.parent / target if target else f
                if not path.exists():
                    broken.append(f"{f.relative_to(ROOT)}:{n}: {target}")
                elif anchor and path.suffix == ".md":
                    heads = {slug(h) for h in re.findall(r"^#+ (.*)$", path.read_text(), re.M)}
                    if anchor not in heads:
                        broken.append(f"{f.relative_to(ROOT)}:{n}: {target}#{anchor}")
    assert not broken, "links to files or headings that do not exist:\n" + "\n".join(broken)


def test_ci_runs_the_readme_test_command():
    """.ci/run runs the README's test command as written, as one of its stages (then lint, the
    low-uvicorn pass, the lane-off pass and the fuzzers)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("Install and run the whole test suite", 1)[1]
    command = re.search(r"```sh\n(.*?)\n```", section, re.S).group(1).strip()
    staged = f'bash -c "{command}"'
    assert any(
        line.startswith("stage ") and staged in line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
    ), command


# The performance and load-test pages are a reference for a user with only a clone: what is measured,
# the command that measured it and the current figures; the history stays in git.
PERF_DOCS = ("docs/benchmarks.md", "docs/loadtest.md")
# a commit hash: 7-40 hex digits standing alone, with at least one digit and one letter (so that
# neither a word such as "deadbeef"/"accede" nor a number such as 1048576 is one)
HASH = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/-])", re.I)
# an issue or stop of the project's tracker: "#34", "issue 32", "issues #4 and #5", "stop 38"
TRACKER = re.compile(r"(?<![\w&#/])#\d+\b|\b(?:issue|stop)s?\s+#?\d+\b", re.I)
# narration of who else used the machine
NARRATION = re.compile(
    r"\bengineers?\b|\btenants?\b|\bother (?:sessions?|people|users?)\b|\bshared by\b", re.I
)
# a command that produced a table: python, posenc or bash, maybe behind VAR=value settings
COMMAND = r"(?:[A-Z][A-Z0-9_]*=\S*\s+)*(?:python3?|posenc|bash)\s"
TABLE = re.compile(r"^\|.*\|[ \t]*\n\|[ \t]*:?-{3,}", re.M)


def perf_lines():
    for name in PERF_DOCS:
        for n, line in enumerate((ROOT / name).read_text().splitlines(), 1):
            yield f"{name}:{n}", line


def test_perf_docs_quote_no_commit_hashes():
    found = [f"{where}: {m}" for where, line in perf_lines() for m in HASH.findall(line)]
    assert not found, (
        "commit hashes in the docs (git keeps the history; say what is measured):\n" + "\n".join(found)
    )


def test_perf_docs_name_no_issue_numbers():
    found = [f"{where}: {m}" for where, line in perf_lines() for m in TRACKER.findall(line)]
    assert not found, "issue or stop numbers mean nothing in a clone; name the feature:\n" + "\n".join(found)


def test_perf_docs_do_not_narrate_the_machine_users():
    found = [f"{where}: {m}" for where, line in perf_lines() for m in NARRATION.findall(line)]
    assert not found, "describe the machine once (shared, noisy), not who used it:\n" + "\n".join(found)


def sections(text: str) -> dict[str, str]:
    """The `## ` sections of a Markdown page (their `###` subsections included), by heading."""
    parts = re.split(r"^## (.*)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def has_command(section: str) -> bool:
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", section, re.M | re.S)
    if any(re.match(r"\s*" + COMMAND, line) for block in fenced for line in block.splitlines()):
        return True
    return re.search(r"`" + COMMAND + r"[^`]*`", section) is not None


def test_every_benchmark_table_has_its_command():
    page = sections((ROOT / "docs" / "benchmarks.md").read_text())
    missing = [h for h, body in page.items() if TABLE.search(body) and not has_command(body)]
    assert not missing, "benchmarks.md sections with a table but no command that produced it:\n" + "\n".join(
        missing
    )


def test_the_doc_rules_catch_what_they_are_for():
    """The patterns above flag what they are for and nothing ordinary."""
    assert HASH.findall("at commit d08f7d2, and 9063506a") == ["d08f7d2", "9063506a"]
    assert not HASH.findall("1048576 rows, deadbeef, avx512f, 0xFBFF, cliffs-throughput.png, e1234567x")
    assert len(TRACKER.findall("issue #34, issues 4 and #5, stop 38")) == 4
    assert not TRACKER.findall('{"start": 0, "stop": 131072}, [x](#anchor), &#8212;')
    assert has_command("| a |\n|---|\n\n```\nPOSENC_LANE=off python tests/bench/x.py\n```\n")
    assert has_command("`posenc loadtest --scenario realistic-mix`")
    assert not has_command("| a |\n|---|\n\n`tests/bench/x.py`\n```\n# python x\n```\n")
