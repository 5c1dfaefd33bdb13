"""The package's shape: stages whose imports only flow down (.importlinter), no import circle among
advisor's modules, and each stage saying what it owns and what it may import."""

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("core", "read", "evidence", "memory", "diagnosis", "plans", "pipeline", "render", "triage", "cli")


def _circles(edges):
    """Strongly connected components of two or more modules (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = counter[0]
                counter[0] += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(edges[w])))
            elif w in on:
                low[v] = min(low[v], index[w])
    return out


def test_no_import_circle_among_modules():
    graph = grimp.build_graph("advisor")
    mods = set(graph.modules)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) & mods for m in mods}
    assert _circles(edges) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_flow_down_the_stages():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.fail("lint-imports is missing: pip install '.[test]'")
    p = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "broken" in p.stdout and " 0 broken" in p.stdout


def test_every_stage_says_what_it_may_import():
    for stage in STAGES:
        doc = (ROOT / "advisor" / stage / "__init__.py").read_text(encoding="utf-8")
        assert doc.startswith('"""') and ("May import" in doc or "Imports nothing" in doc or "may import" in doc.lower()), stage
