"""What the suite's numbers are held to: the share of test items checked against an honest reference
(transformers' or diffusers' own functions, or float64 math written from docs/reference.md) versus
those checked only against posenc's own compute or pipeline.

    python tests/tools/oracle_share.py            # collects the suite (pytest --collect-only), prints the figures
    python tests/tools/oracle_share.py --list own # and the items of one class (own, independent, other)

Each collected item is classified by what its test function reaches, through the helpers the tests
tree defines (every name and attribute a function's body mentions, resolved in its module, or
through its ``from tests... import``, to a function of tests/**/*.py, and followed):
- independent: it reaches an oracle: transformers/diffusers, tests/independent.py, tests/engine/float64_refs.py,
  tests/engine/rope_refs.py's float64 side, tests/numeric.py's rounding and ulp checks, mpmath, the
  kernel tests' formula oracles;
- own: it calls posenc's own numbers (compute, pipeline.arrays, encode, reference_safetensors, the
  full path's answer) and compares for equality, and reaches no oracle;
- other: neither (status codes, errors, process life, byte layout): no numeric reference at all.
Static and name-based, so a rough figure: a helper that calls an oracle only on some paths counts.
"""

from __future__ import annotations

import argparse
import ast
import collections
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

ORACLES = {  # names whose use means an honest reference is consulted
    "transformers",
    "diffusers",
    "mpmath",
    "assert_answer",
    "assert_c_answer",
    "t5_buckets64",  # tests/independent.py
    "sinusoidal64",
    "grid64",
    "bias64",
    "slopes64",
    "one_d",  # float64_refs.py
    "ref_inv64",
    "ref_cos_sin64",
    "ref_mrope64",
    "ref_axes64",  # rope_refs.py (float64)
    "round_once",
    "nearest_bf16_bits",
    "assert_rounded_once",
    "assert_within_ulp",  # numeric.py
    "assert_same_rounding",
    "alibi64",
    "t5_lookup",
    "sincos64",  # kernel oracles
}
# posenc's own numbers taken as the expected value: calls of these names, or of these attributes
OWN_CALLS = {
    "reference_safetensors",
    "compute",
    "encode",
    "to_safetensors",
    "full_path",
    "answer_both",
    "lane_json",
    "rest_answer",
}
OWN_ATTRS = {
    ("pipeline", "arrays"),
    ("ref", "round_into"),
    ("ref", "sincos"),
    ("ref", "alibi_block"),
    ("ref", "t5_block"),
    ("ref", "gather_rows"),
    ("ref", "rope_expand"),
}
OWN_METHODS = {"lookup", "execute", "answer"}  # a client's or service's answer, on any object
EQUAL = {"array_equal", "assert_array_equal", "assert_same", "assert_allclose", "assert_close"}
ERRORS = {"raises", "spec_error"}  # an error path: the equality checked is of a message or a field


def _modules():
    for path in sorted(TESTS.rglob("*.py")):
        try:
            yield path, ast.parse(path.read_text(), str(path))
        except SyntaxError:
            continue


class Fn:
    """What one function's body mentions, calls and compares."""

    def __init__(self, node):
        self.names, self.own, self.equal = set(), False, False
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                self.names.add(n.id)
            elif isinstance(n, ast.Attribute):
                self.names.add(n.attr)
            elif isinstance(n, ast.Compare) and any(isinstance(op, ast.Eq) for op in n.ops):
                self.equal = True
            if isinstance(n, ast.Call):
                f = n.func
                if isinstance(f, ast.Name):
                    self.own |= f.id in OWN_CALLS
                elif isinstance(f, ast.Attribute):
                    owner = f.value.id if isinstance(f.value, ast.Name) else None
                    self.own |= (owner, f.attr) in OWN_ATTRS or f.attr in OWN_METHODS
        self.arrays = bool(self.names & EQUAL)
        self.errors = bool(self.names & ERRORS)


def graph():
    """({(module, function): Fn}, {module: {alias: (module, name)}}, external names)."""
    fns, imports, external = {}, collections.defaultdict(dict), set()
    for path, tree in _modules():
        mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module:
                top = n.module.split(".")[0]
                for a in n.names:
                    if top in ("transformers", "diffusers"):
                        external.add(a.asname or a.name)
                    elif top == "tests":
                        imports[mod][a.asname or a.name] = (n.module, a.name)
            elif isinstance(n, ast.Import):
                external.update(
                    a.asname or a.name
                    for a in n.names
                    if a.name.split(".")[0] in ("transformers", "diffusers")
                )
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                fns.setdefault((mod, n.name), Fn(n))
    return fns, imports, external


def _resolve(mod: str, name: str, fns: dict, imports: dict, depth: int = 0):
    if (mod, name) in fns:
        return mod, name
    if depth < 4 and name in imports.get(mod, {}):
        return _resolve(*imports[mod][name], fns, imports, depth + 1)
    return None


def classify(start: tuple, fns: dict, imports: dict, oracles: set) -> str:
    """Follow the helpers ``start`` reaches (names resolved in each module, imports followed)."""
    seen, todo = set(), [start]
    own = equal = arrays = errors = False
    while todo:
        key = todo.pop()
        if key in seen or key not in fns:
            continue
        seen.add(key)
        fn = fns[key]
        if fn.names & oracles:
            return "independent"
        own, equal, arrays, errors = (
            own or fn.own,
            equal or fn.equal,
            arrays or fn.arrays,
            errors or fn.errors,
        )
        todo.extend(k for n in fn.names if (k := _resolve(key[0], n, fns, imports)) is not None)
    return "own" if own and (arrays or (equal and not errors)) else "other"


def collect() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", str(TESTS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    items = [line.strip() for line in out.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    items = [
        i.split("tests/", 1)[-1] and "tests/" + i.split("tests/", 1)[-1] for i in items
    ]  # relative to ROOT
    if not items:
        sys.exit(f"nothing collected:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", choices=["independent", "own", "other"], help="print the items of this class")
    ap.add_argument("--root", type=pathlib.Path, help="another checkout's root (its tests/), e.g. to compare")
    args = ap.parse_args()
    global ROOT, TESTS
    if args.root is not None:
        ROOT = args.root.resolve()
        TESTS = ROOT / "tests"
    fns, imports, external = graph()
    oracles = ORACLES | external
    counts, per_file, listed = collections.Counter(), collections.defaultdict(collections.Counter), []
    for item in collect():
        path, *rest = item.split("::")
        mod = ".".join(pathlib.Path(path).with_suffix("").parts)
        kind = classify((mod, rest[-1].split("[")[0]), fns, imports, oracles)
        counts[kind] += 1
        per_file[path][kind] += 1
        if kind == args.list:
            listed.append(item)
    numeric = counts["independent"] + counts["own"]
    total = sum(counts.values())
    print(
        f"{total} test items: {counts['independent']} checked against transformers/diffusers or float64 math, "
        f"{counts['own']} only against posenc's own compute/pipeline, {counts['other']} with no numeric reference"
    )
    if numeric:
        print(
            f"of the {numeric} that check numbers: {100 * counts['independent'] / numeric:.1f}% against an honest "
            f"reference, {100 * counts['own'] / numeric:.1f}% only against posenc's own"
        )
    worst = sorted(((c["own"], f) for f, c in per_file.items() if c["own"]), reverse=True)[:10]
    if worst:
        print("files with the most items checked only against posenc's own numbers:")
        for n, f in worst:
            print(f"  {n:5d}  {f}")
    for item in listed:
        print(item)


if __name__ == "__main__":
    main()
