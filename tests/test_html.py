"""The HTML report (issue 7): the structure of every sample's page, and the pages in headless Chromium.

Structure: the memory picture has one SVG segment per non-zero component, laid end to end on the
picture's scale; the margin line sits at 80 % of usable on that scale; the timeline's failure marker
sits at facts.step / facts.total_steps. Browser: no console errors, a non-blank screenshot of the
requested size, and no element whose text overflows its box at 375 px and 1280 px.
"""

import functools
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from conftest import ROOT, SAMPLES

from advisor.memory.budget import MARGIN, RESERVE_GIB
from advisor.render.html import BAR_W, COMPONENTS, TL_LOAD, TL_TRAIN

SLUGS = sorted(p.stem for p in SAMPLES.glob("*.log"))
CONFIGS = {k: v.get("config") for k, v in
           YAML(typ="safe").load((SAMPLES / "expectations.yaml").read_text(encoding="utf-8")).items()}
VOID = {"meta", "link", "br", "img", "input", "hr", "col", "wbr", "source", "area", "base", "embed", "param", "track"}


# ---- a tiny DOM ------------------------------------------------------------------------------------
class Node:
    def __init__(self, tag, attrs, parent=None):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], ""

    @property
    def classes(self):
        return (self.attrs.get("class") or "").split()

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def find_all(self, tag=None, cls=None, **attrs):
        return [n for n in self.iter() if (tag is None or n.tag == tag) and (cls is None or cls in n.classes)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def find(self, *a, **kw):
        hits = self.find_all(*a, **kw)
        return hits[0] if hits else None

    def all_text(self):
        return self.text + "".join(c.all_text() for c in self.children)


class Tree(HTMLParser):
    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#root", {})
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.text += data


def parse(text):
    return Tree(text).root


@functools.lru_cache(maxsize=None)
def diagnosis(slug, lang):
    from advisor.pipeline import diagnose_path
    cfg = CONFIGS.get(slug)
    return diagnose_path(str(SAMPLES / f"{slug}.log"), config_path=str(SAMPLES / cfg) if cfg else None, lang=lang)


@functools.lru_cache(maxsize=None)
def page(slug, lang):
    from advisor.render import render
    return render(diagnosis(slug, lang), "html", lang)


def f(node, name):
    return float(node.attrs[name])


# ---- structure of every sample --------------------------------------------------------------------
def check_self_contained(text, lang):
    assert text.startswith("<!doctype html>")
    root = parse(text)
    assert root.find("html").attrs["lang"] == ("zh-CN" if lang == "zh" else "en")
    assert root.find("meta", name="viewport") is not None
    assert "prefers-color-scheme: dark" in text
    assert "<script" not in text.lower()
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", text), "no external resources, only #anchors"
    assert "@import" not in text and "url(" not in text
    return root


def check_segments(svg, parts, scale):
    """One rect per non-zero part, in order, end to end, each as wide as its GiB on the scale."""
    segs = svg.find_all("rect", cls="seg")
    assert [s.attrs["data-component"] for s in segs] == [k for k, v in parts if v and v > 0]
    x = 0.0
    for s, (_, v) in zip(segs, [(k, v) for k, v in parts if v and v > 0]):
        assert f(s, "x") == pytest.approx(x, abs=0.05)
        assert f(s, "width") == pytest.approx(BAR_W * v / scale, abs=0.05)
        x = f(s, "x") + f(s, "width")
    assert x <= BAR_W + 0.1, "every bar fits the picture's scale"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("slug", SLUGS)
def test_sample_page_structure(slug, lang):
    d = diagnosis(slug, lang)
    text = page(slug, lang)
    root = check_self_contained(text, lang)
    assert d.summary in root.all_text().replace("\n", " ") or escape(d.summary) in text

    # the memory picture
    bars = root.find("div", cls="bars")
    mem = d.memory or {}
    if d.budget is None and mem.get("total_gib") is None:
        assert bars is None
    else:
        assert bars is not None, "a device OOM with numbers or an estimate gets a picture"
        scale = f(bars, "data-scale")
        svgs = bars.find_all("svg", cls="bar")
        capacity = mem.get("total_gib") or d.budget.get("capacity_gib")
        if d.budget:
            est = svgs[0]
            assert est.attrs["data-kind"] == "budget"
            check_segments(est, [(k, d.budget[f"{k}_gib"]) for k in COMPONENTS], scale)
            assert len(est.find_all("rect", cls="seg")) == sum(1 for k in COMPONENTS if d.budget[f"{k}_gib"] > 0)
        else:
            assert "--model" in bars.parent.all_text(), "without a model the page says what the estimate needs"
        alloc = bars.find_all("svg", data_kind="alloc")
        if mem.get("total_gib") is not None and mem.get("allocated_by_pytorch_gib") is not None:
            assert len(alloc) == 1
            seg = alloc[0].find("rect", cls="seg", data_component="allocated")
            assert f(seg, "width") == pytest.approx(BAR_W * mem["allocated_by_pytorch_gib"] / scale, abs=0.05)
        if capacity:
            usable = d.budget["usable_gib"] if d.budget and d.budget.get("capacity_gib") == capacity \
                else capacity - RESERVE_GIB
            for svg in svgs:
                margin, cap = svg.find("line", cls="margin"), svg.find("line", cls="cap")
                assert f(margin, "x1") == pytest.approx(BAR_W * (1 - MARGIN) * usable / scale, abs=0.05)
                assert f(cap, "x1") == pytest.approx(BAR_W * capacity / scale, abs=0.05)
        after = [s for s in svgs if s.attrs["data-kind"] == "budget"][1:]
        for svg in after:
            total = sum(float(s.attrs["data-gib"]) for s in svg.find_all("rect", cls="seg"))
            assert total < d.budget["total_gib"], "the plan lowers the estimate"

    # the timeline
    tl = root.find("svg", cls="tl")
    assert tl is not None
    marker = tl.find("line", cls="tl-marker")
    step, total = d.facts.get("step"), d.facts.get("total_steps")
    if d.phase == "load":
        assert TL_LOAD[0] < f(marker, "x1") <= TL_LOAD[1], "a loading failure is marked in the loading zone"
    elif step is not None and total:
        assert marker.attrs["data-step"] == str(step)
        x = TL_TRAIN[0] + (TL_TRAIN[1] - TL_TRAIN[0]) * min(1.0, step / total)
        assert f(marker, "x1") == pytest.approx(x, abs=0.05)
        assert f(tl, "data-train-x") == TL_TRAIN[0]
    kind = {"no_failure": "tl-end", "incomplete": "tl-cut"}.get(d.verdict, "tl-fail")
    if marker is not None:
        assert kind in marker.classes

    # the plan, the diff, the evidence
    rows = [n for n in root.iter() if "data-action" in n.attrs]
    assert [r.attrs["data-action"] for r in rows] == [s["action"] for s in d.plan or []]
    patch = (d.patch or "").splitlines()
    for cls, sign in (("d-add", "+"), ("d-del", "-")):
        assert len(root.find_all("span", cls=cls)) == sum(ln.startswith(sign) and not ln.startswith(sign * 3)
                                                          for ln in patch)
    ev = root.find("ol", cls="evidence")
    assert sorted(int(li.attrs["data-line"]) for li in ev.find_all("li")) == sorted(e.line for e in d.evidence)
    if lang == "zh":
        assert "运行时间线" in text and "证据" in text


def test_after_the_plan_fits_for_the_docs_sample():
    d = diagnosis("lf-first-step-activations", "en")
    root = parse(page("lf-first-step-activations", "en"))
    svgs = root.find_all("svg", cls="bar")
    assert [s.attrs["data-kind"] for s in svgs] == ["budget", "alloc", "budget"]
    scale = f(root.find("div", cls="bars"), "data-scale")
    after = svgs[2].find_all("rect", cls="seg")
    end = f(after[-1], "x") + f(after[-1], "width")
    assert end * scale / BAR_W <= (1 - MARGIN) * d.budget["usable_gib"], "batch 1 + checkpointing fits the margin"
    assert "reduce_batch, grad_checkpointing" in root.all_text()


def test_escaping():
    from advisor.pipeline import diagnose_text
    from advisor.render.html import render_html
    log = ("<script>alert('x')</script> & <b>bold</b>\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "23.65 GiB of which 1.00 GiB is free. <img src=x onerror=alert(1)>\n")
    text = render_html(diagnose_text(log, source="<b>x</b>.log"), "en")
    assert "<script" not in text and "<img" not in text and "<b>x</b>" not in text
    assert "&lt;b&gt;x&lt;/b&gt;.log" in text


# ---- budget and triage pages ----------------------------------------------------------------------
def _spec(**kw):
    from advisor.plans.runspec import spec_from_facts
    spec, _ = spec_from_facts({}, gpu=kw.pop("gpu", None), model=kw.pop("model"), overrides=kw)
    return spec


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("kw", [dict(model="Qwen2.5-7B-Instruct", method="lora", gpu="4090", batch=4, seq_len=2048),
                                dict(model="Llama-3.1-8B", method="full", gpu="A100-80G", batch=2, grad_ckpt=False,
                                     precision="fp32", num_gpus=4, deepspeed="zero2"),
                                dict(model="Qwen2.5-7B-Instruct", method="qlora", batch=1, seq_len=256)])
def test_budget_page(kw, lang):
    from advisor.memory.budget import estimate
    from advisor.render.html import render_budget_html, what_ifs
    spec = _spec(**kw)
    b = estimate(spec)
    root = check_self_contained(render_budget_html(b, spec, lang), lang)
    bars = root.find("div", cls="bars")
    scale = f(bars, "data-scale")
    svgs = bars.find_all("svg", cls="bar")
    variants = what_ifs(spec, lang)
    assert len(svgs) == 1 + len(variants)
    for svg, s in zip(svgs, [spec] + [v for _, v in variants]):
        check_segments(svg, [(k, getattr(estimate(s), f"{k}_gib")) for k in COMPONENTS], scale)
        if b.capacity_gib:
            margin = f(svg.find("line", cls="margin"), "x1")
            assert margin == pytest.approx(BAR_W * 0.8 * b.usable_gib / scale, abs=0.05)
        else:
            assert svg.find("line", cls="margin") is None
    names = {n for n, _ in variants}
    if kw.get("batch", 1) > 1:
        assert any(("→" in n and str(kw["batch"] // 2) in n) for n in names)


@functools.lru_cache(maxsize=None)
def triage_report():
    from advisor.triage.run import run_triage
    return run_triage([str(SAMPLES)], "en", jobs=1)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_triage_page(lang):
    from advisor.render.html import render_triage_html
    report = triage_report()
    root = check_self_contained(render_triage_html(report, lang), lang)
    s = report["summary"]
    charts = root.find_all("ul", cls="hbars")
    assert len(charts) == 3
    for ul, key in zip(charts, ("by_verdict", "by_phase", "by_component")):
        got = {li.attrs["data-key"]: int(li.attrs["data-count"]) for li in ul.find_all("li")}
        assert got == s[key]
        top = max(got.values())
        for li in ul.find_all("li"):
            bar = li.find_all("rect")[-1]
            assert f(bar, "width") == pytest.approx(100 * int(li.attrs["data-count"]) / top, abs=0.01)
    rows = [n for n in root.iter() if "data-group" in n.attrs]
    assert [r.attrs["data-group"] for r in rows] == [g["id"] for g in report["groups"]]
    for row, g in zip(rows, report["groups"]):
        href = row.find("a").attrs["href"]
        section = root.find("section", id=href[1:])
        assert section is not None, href
        assert g["representative"] in section.all_text()
        assert len(section.find("ul", cls="members").find_all("li")) == g["count"]


# ---- the command line: -o and --open ---------------------------------------------------------------
def run_cli(*args, env=None):
    e = dict(os.environ, **(env or {}))
    e.pop("OOM_DOCTOR_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "advisor.cli", *args], capture_output=True, cwd=ROOT, env=e,
                          timeout=120)


def test_cli_writes_html_and_opens_it(tmp_path):
    stub = tmp_path / "browser.sh"
    seen = tmp_path / "opened.txt"
    stub.write_text(f"#!/bin/sh\necho \"$@\" > {seen}\n")
    stub.chmod(0o755)
    out = tmp_path / "report.html"
    p = run_cli("diagnose", "log_samples/lf-first-step-activations.log", "--config",
                "log_samples/lf-first-step-activations.yaml", "--format", "html", "-o", str(out), "--open",
                env={"BROWSER": str(stub)})
    assert p.returncode == 1, p.stderr
    assert out.read_text(encoding="utf-8").startswith("<!doctype html>")
    for _ in range(50):                       # the browser runs in the background
        if seen.exists():
            break
        import time
        time.sleep(0.1)
    assert seen.read_text().strip() == out.resolve().as_uri()

    p = run_cli("budget", "--model", "Qwen2.5-7B-Instruct", "--gpu", "4090", "--open",
                env={"BROWSER": str(tmp_path / "no-such-browser")})
    assert p.returncode in (0, 1), p.stderr
    assert p.stdout == b"", "--open without -o writes a temporary file, not stdout"
    path = re.search(rb"(\S+\.html)", p.stderr).group(1).decode()
    assert Path(path).read_text(encoding="utf-8").startswith("<!doctype html>")
    os.unlink(path)


# ---- headless Chromium ----------------------------------------------------------------------------
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTHS = (375, 1280)
HEIGHT = 900
# counts elements whose content is wider than their box (scroll containers excepted), and the page itself
OVERFLOW_JS = """<script>(function(){var bad=[];var all=document.querySelectorAll('body *');
for(var i=0;i<all.length;i++){var e=all[i];if(e instanceof SVGElement)continue;var cs=getComputedStyle(e);
if(cs.display==='inline'||cs.display==='none'||cs.overflowX==='auto'||cs.overflowX==='scroll')continue;
if(e.scrollWidth>e.clientWidth+1)bad.push(e.tagName+'.'+e.className+'['+e.scrollWidth+'>'+e.clientWidth+']');}
if(document.documentElement.scrollWidth>window.innerWidth+1)bad.push('page['+document.documentElement.scrollWidth+']');
var r=parent.document.getElementById('result');
r.textContent+=window.name+'='+innerWidth+':'+bad.length+':'+bad.slice(0,4).join(',')+'\\n';
})();</script>"""


def browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium(url, *extra, timeout=120):
    exe = browser()
    with tempfile.TemporaryDirectory() as profile:
        p = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                            "--disable-background-networking", "--disable-component-update", "--disable-sync",
                            f"--user-data-dir={profile}", *extra, url], capture_output=True, timeout=timeout)
    return p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "a PNG"
    return struct.unpack(">II", data[16:24])


def png_colours(data, enough=16):
    """Distinct colours in the PNG (8-bit RGB/RGBA), counted until `enough`; no Pillow needed."""
    pos, idat = 8, []
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat.append(body)
    assert depth == 8 and ctype in (2, 6), (depth, ctype)
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(b"".join(idat)), w * bpp
    prev, seen = bytearray(stride), set()
    for y in range(h):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        seen.update(bytes(line[x:x + 3]) for x in range(0, stride, bpp))
        if len(seen) >= enough:
            return len(seen)
        prev = line
    return len(seen)


needs_browser = pytest.mark.skipif(browser() is None, reason="no chromium/chrome on PATH (.ci/run installs one)")


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Every sample in both languages, a budget and a triage page, written as files."""
    from advisor.memory.budget import estimate
    from advisor.render.html import render_budget_html, render_triage_html
    folder = tmp_path_factory.mktemp("html")
    out = {}
    for slug in SLUGS:
        for lang in ("en", "zh"):
            out[f"{slug}.{lang}"] = page(slug, lang)
    spec = _spec(model="Qwen2.5-7B-Instruct", method="lora", gpu="4090", batch=4, seq_len=2048)
    for lang in ("en", "zh"):
        out[f"budget.{lang}"] = render_budget_html(estimate(spec), spec, lang)
        out[f"triage.{lang}"] = render_triage_html(triage_report(), lang)
    files = {}
    for name, text in out.items():
        files[name] = folder / f"{name}.html"
        files[name].write_text(text, encoding="utf-8")
    return files


@needs_browser
def test_cjk_font_installed():
    fc = shutil.which("fc-list")
    if fc is None:
        pytest.skip("no fontconfig to ask")
    fonts = subprocess.run([fc, ":lang=zh", "family"], capture_output=True, text=True).stdout
    assert fonts.strip(), "Chinese pages need a CJK font (.ci/run installs fonts-wqy-zenhei)"


@needs_browser
def test_no_console_errors(pages, tmp_path):
    """All pages at once, each in a frame of its own, beside a control page that does log an error."""
    control = tmp_path / "control.html"
    control.write_text("<!doctype html><script>console.error('control-message')</script>", encoding="utf-8")
    frames = "".join(f'<iframe src="{p.as_uri()}" width="1280" height="200"></iframe>'
                     for p in [*pages.values(), control])
    wrapper = tmp_path / "all.html"
    wrapper.write_text(f"<!doctype html><title>all</title>{frames}", encoding="utf-8")
    dom, log = chromium(wrapper.as_uri(), "--enable-logging=stderr", "--v=0", "--window-size=1280,900",
                        "--dump-dom")
    assert "<title>all</title>" in dom
    messages = [ln for ln in log.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert any("control-message" in m for m in messages), "the browser reports the frames' console messages"
    assert [m for m in messages if "control-message" not in m] == []


@needs_browser
@pytest.mark.parametrize("width", WIDTHS)
def test_no_text_overflows(pages, tmp_path, width):
    """Each page in a frame `width` px wide, with a measuring script added to a test copy (not the product)."""
    frames = []
    for name, path in pages.items():
        text = path.read_text(encoding="utf-8")
        text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)   # let the test script run
        text = text.replace("</body>", OVERFLOW_JS + "</body>")
        frames.append(f'<iframe name="{name}" width="{width}" height="{HEIGHT}" srcdoc="{escape(text)}"></iframe>')
    control = f'<p style="width:100px;white-space:nowrap">{"wide " * 40}</p>{OVERFLOW_JS}'
    frames.append(f'<iframe name="control" width="{width}" height="200" srcdoc="{escape(control)}"></iframe>')
    wrapper = tmp_path / f"overflow-{width}.html"
    wrapper.write_text("<!doctype html><style>body{margin:0}iframe{display:block;border:0}</style>"
                       f"<pre id='result'></pre>{''.join(frames)}", encoding="utf-8")
    dom, _ = chromium(wrapper.as_uri(), f"--window-size={width + 40},{HEIGHT}", "--dump-dom")
    result = re.search(r"<pre id=\"result\">(.*?)</pre>", dom, re.S).group(1)
    lines = [ln for ln in result.splitlines() if ln.strip()]
    assert len(lines) == len(pages) + 1, result
    assert any(re.match(rf"control={width}:[1-9]", ln) for ln in lines), "the check does see an overflow"
    bad = [ln for ln in lines if not ln.startswith("control=") and not re.fullmatch(rf"\S+={width}:0:", ln)]
    assert bad == [], "\n".join(bad)


@needs_browser
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["lf-first-step-activations.en", "llamaboard-webui-zh.zh", "budget.zh",
                                  "triage.en"])
def test_screenshot(pages, tmp_path, name, width):
    shot = tmp_path / "shot.png"
    chromium(pages[name].as_uri(), f"--window-size={width},{HEIGHT}", f"--screenshot={shot}")
    data = shot.read_bytes()
    assert png_size(data) == (width, HEIGHT)
    assert png_colours(data) >= 16, "not a blank page"


def test_docs_screenshot():
    data = (ROOT / "docs" / "report.png").read_bytes()
    assert png_size(data)[0] == 1280
    assert png_colours(data) >= 16
