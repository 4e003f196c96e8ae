"""The documentation site, checked as a reader sees it: `mkdocs build --strict` passes, every family and public name
has its page or entry, nothing is fetched from the network, and in a real headless Chromium the family pages show
typeset equations, loaded images and no console error. The checker itself is shown to fail on a page whose maths or
images are broken. Marker `docs` (needs the `docs` extra and a `chromium` binary): `pytest -m docs`."""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.docs

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # containers often have a small /dev/shm
    "--remote-debugging-port=0",
]

# Run in the page after its load event: wait for MathJax and the images, then report what a reader would see.
PAGE_REPORT = r"""
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await Promise.all([...document.images].map(img => img.complete ? null
    : new Promise(done => { img.onload = img.onerror = done; })));
  const math = [...document.querySelectorAll('.arithmatex')];
  const walker = document.createTreeWalker(document.querySelector('.md-content') || document.body, NodeFilter.SHOW_TEXT);
  const raw = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest('pre, code, script, mjx-container')) continue;
    const hit = node.textContent.match(/\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{/);
    if (hit) raw.push(node.textContent.trim().slice(0, 80));
  }
  return {
    math: math.length,
    untypeset: math.filter(el => !el.querySelector('mjx-container')).map(el => el.textContent.slice(0, 80)),
    errors: [...document.querySelectorAll('mjx-merror')].map(el => el.textContent.slice(0, 80)),
    raw: raw,
    images: [...document.images].map(img => [img.getAttribute('src').slice(0, 80), img.naturalWidth]),
  };
})()
"""


class Browser:
    """Chromium over the DevTools protocol: one websocket, flat sessions, events kept per session."""

    def __init__(self, profile: Path):
        import websocket

        executable = shutil.which("chromium") or shutil.which("chromium-browser")
        assert executable, "no chromium binary: apt-get install -y chromium"
        profile.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and len(port_file.read_text().split()) == 2):
            assert self.process.poll() is None and time.monotonic() < deadline, "chromium did not start"
            time.sleep(0.1)
        port, path = port_file.read_text().split()
        self.socket = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", suppress_origin=True, timeout=60)
        self.last_id = 0
        self.events = []

    def send(self, method, session=None, **params):
        self.last_id += 1
        message = {"id": self.last_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.socket.send(json.dumps(message))
        while True:
            reply = json.loads(self.socket.recv())
            if reply.get("id") == self.last_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method, session, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events:
                if event.get("method") == method and event.get("sessionId") == session:
                    return event
            self.events.append(json.loads(self.socket.recv()))
        raise TimeoutError(method)

    def close(self):
        self.socket.close()
        self.process.terminate()
        self.process.wait(timeout=30)


def page_problems(browser: Browser, url: str, origin: str) -> list[str]:
    """What is wrong with the page at `url` as the browser shows it: untypeset or erroneous maths, raw TeX
    delimiters, images that did not load, console errors and exceptions, and requests that leave `origin`."""
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable", session)
    browser.send("Page.navigate", session, url=url)
    browser.wait_for("Page.loadEventFired", session)
    report = browser.send("Runtime.evaluate", session, expression=PAGE_REPORT, awaitPromise=True, returnByValue=True)
    assert "exceptionDetails" not in report, report
    report = report["result"]["value"]
    time.sleep(0.3)  # late console messages (a font that failed) arrive after the load
    browser.send("Runtime.evaluate", session, expression="1")  # collect the events sent meanwhile
    problems = [f"not typeset: {text!r}" for text in report["untypeset"]]
    problems += [f"TeX error: {text!r}" for text in report["errors"]]
    problems += [f"raw TeX on the page: {text!r}" for text in report["raw"]]
    problems += [f"image not loaded: {src}" for src, width in report["images"] if width == 0]
    problems += session_problems(browser, session, origin)
    browser.send("Target.closeTarget", targetId=target)
    return problems


def build_site(site_dir: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return result.stderr


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site_dir = tmp_path_factory.mktemp("site")
    log = build_site(site_dir)
    assert "WARNING" not in log, log
    return site_dir


@pytest.fixture(scope="module")
def served(site):
    """The built site over HTTP on the loopback interface, as `mkdocs serve` or any static server shows it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    browser = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield browser
    browser.close()


def test_every_family_public_name_and_experiment_has_its_page(site):
    import hf_seq

    for fam in hf_seq.FAMILIES:
        page = (site / "families" / f"{fam.name}.html").read_text()
        assert 'class="arithmatex"' in page, fam.name  # the modeling file's equations
        assert fam.config in page and all(model in page for model in fam.models.values()), fam.name
    reference = (site / "reference" / "models.html").read_text()
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from hooks import public_paths
    finally:
        sys.path.remove(str(ROOT / "docs"))
    for name, path in public_paths():
        assert f'id="{path}"' in reference, name
    for source in sorted((ROOT / "docs" / "experiments").glob("*.md")):
        if source.name == "index.md":
            continue
        page = (site / "experiments" / f"{source.stem}.html").read_text()
        images = re.findall(r'<img[^>]+src="([^"]+)"', page)
        assert images, source.name
        for src in images:
            assert (site / "experiments" / src).is_file(), (source.name, src)


def test_the_site_loads_nothing_from_the_network(site):
    """No script, stylesheet or font comes from another host: the pages and the CSS refer to the site's own files."""
    outside = re.compile(r"""(?:<script[^>]+src|<link[^>]+href)=["'](?:https?:)?//|url\(["']?(?:https?:)?//""")
    for path in site.rglob("*"):
        if path.suffix in (".html", ".css"):
            hits = outside.findall(path.read_text(errors="replace"))
            assert not hits, (path.relative_to(site), hits[:3])
    assert (site / "assets" / "mathjax" / "tex-chtml.js").is_file()


def test_family_examples_run():
    """The minimal example of every family page runs as printed."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from hooks import example
    finally:
        sys.path.remove(str(ROOT / "docs"))
    import hf_seq

    for fam in hf_seq.FAMILIES:
        exec(compile(example(fam), f"<example of {fam.name}>", "exec"), {})


def test_porting_tutorial_runs(tmp_path, monkeypatch):
    """The porting tutorial's Python blocks run as printed (they build their own models: no download); an abridged
    excerpt of a conversion pair (a bare `...` line elides code) is valid Python whose names a pair module defines."""
    import ast
    import importlib
    import pkgutil

    import hf_seq.convert

    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "tutorials" / "porting.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    excerpts = [block for block in blocks if re.search(r"^\s*\.\.\.\s*$", block, flags=re.M)]
    runnable = [block for block in blocks if block not in excerpts]
    assert len(runnable) == 2
    for block in runnable:
        exec(compile(block, "<docs/tutorials/porting.md>", "exec"), {"__name__": "tutorial"})
    assert (tmp_path / "ported-seq2seq" / "model.safetensors").is_file()
    pairs = [
        importlib.import_module(f"hf_seq.convert.{info.name}") for info in pkgutil.iter_modules(hf_seq.convert.__path__)
    ]
    for excerpt in excerpts:
        tree = ast.parse(excerpt)
        names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        names |= {target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets}
        assert names and any(all(hasattr(pair, name) for name in names) for pair in pairs), names


def test_pages_in_a_browser(site, served, browser):
    """Every page of the site but the copies of result tables (no maths, no script of their own)."""
    import hf_seq

    pages = sorted(
        path.relative_to(site).as_posix()
        for path in site.rglob("*.html")
        if path.name not in ("404.html", "results.html") and "benchmarks/results" not in path.as_posix()
    )
    assert {f"families/{fam.name}.html" for fam in hf_seq.FAMILIES} <= set(pages)
    assert {f"notebooks/{nb.stem}.html" for nb in (ROOT / "notebooks").glob("*.ipynb")} <= set(pages)
    for page in pages:
        assert page_problems(browser, served + page, served) == [], page


# Every image of a page once loaded: its absolute URL, the link around it, its natural and its shown width.
IMAGES = r"""
(async () => {
  await Promise.all([...document.images].map(img => img.complete ? null
    : new Promise(done => { img.onload = img.onerror = done; })));
  return [...document.images].map(img => ({
    src: img.src,
    link: img.closest('a') ? img.closest('a').href : null,
    natural: img.naturalWidth,
    shown: img.getBoundingClientRect().width,
  }));
})()
"""


def session_problems(browser: Browser, session: str, origin: str) -> list[str]:
    """What the browser reported for one page: exceptions, console errors and requests that leave `origin` (data,
    blob and about URLs, and the page's own websocket, are local)."""
    problems = []
    for event in browser.events:
        if event.get("sessionId") != session:
            continue
        params = event.get("params", {})
        if event["method"] == "Runtime.exceptionThrown":
            problems.append(f"exception: {params['exceptionDetails'].get('text')}")
        elif event["method"] == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            problems.append(f"console.{params['type']}: {[arg.get('value') for arg in params['args']]}")
        elif event["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
            problems.append(f"console error: {params['entry']['text']} {params['entry'].get('url', '')}")
        elif event["method"] == "Network.requestWillBeSent":
            request_url = params["request"]["url"]
            local = origin.replace("http://", "ws://", 1)
            if not request_url.startswith((origin, local, "data:", "blob:", "about:")):
                problems.append(f"request outside the site: {request_url}")
    return problems


def shown_images(browser: Browser, url: str) -> list[dict]:
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    browser.send("Page.enable", session)
    browser.send(
        "Emulation.setDeviceMetricsOverride", session, width=1280, height=1600, deviceScaleFactor=1, mobile=False
    )
    browser.send("Page.navigate", session, url=url)
    browser.wait_for("Page.loadEventFired", session)
    report = browser.send("Runtime.evaluate", session, expression=IMAGES, awaitPromise=True, returnByValue=True)
    browser.send("Target.closeTarget", targetId=target)
    assert "exceptionDetails" not in report, report
    return report["result"]["value"]


def test_the_experiments_index_shows_each_experiments_plot(site, served, browser):
    """The experiments index is a gallery: every experiment and every lineage run has a small picture of the main plot
    its own page shows (the page's first image), linked to that page, and every picture loaded."""
    pages = [f"experiments/{p.stem}.html" for p in sorted((ROOT / "docs" / "experiments").glob("*.md"))]
    pages += [
        p.relative_to(ROOT / "docs").with_suffix(".html").as_posix()
        for p in (ROOT / "docs" / "lineage").rglob("lineage.md")
    ]
    pages.remove("experiments/index.html")
    thumbnails = {
        image["link"]: image for image in shown_images(browser, served + "experiments/index.html") if image["link"]
    }
    for page in pages:
        url = served + page
        assert url in thumbnails, f"no picture links to {page}"
        image = thumbnails[url]
        assert image["natural"] > 0, f"the picture of {page} did not load: {image['src']}"
        assert 0 < image["shown"] <= 320, f"the picture of {page} is not a thumbnail: {image['shown']} px wide"
        on_its_page = [urljoin(url, src) for src in re.findall(r'<img[^>]+src="([^"]+)"', (site / page).read_text())]
        assert image["src"] in on_its_page, f"the picture of {page} is not one its page shows: {image['src']}"


def test_the_home_page_shows_the_lineage(served, browser):
    """The README (the site's home) shows the `hf-seq lineage` command and a committed picture of a lineage result,
    which loads on the site as it does on GitHub (a path relative to the repository)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    assert "hf-seq lineage" in readme and "hf-seq lineage --task translation" in readme
    picture = re.search(r"!\[[^\]]+\]\((docs/lineage/[^)]+\.png)\)", readme)
    assert picture and (ROOT / picture.group(1)).is_file(), "no committed lineage picture in the README"
    site_path = picture.group(1).removeprefix("docs/")
    shown = [image for image in shown_images(browser, served + "index.html") if image["src"] == served + site_path]
    assert shown and all(image["natural"] > 0 and image["shown"] > 0 for image in shown), shown


SEARCH = r"""
(async () => {
  const input = document.querySelector('input.md-search__input');
  for (let attempt = 0; attempt < 100; attempt++) {  // the search index loads in a web worker
    input.value = 'alignment';
    input.dispatchEvent(new Event('input', {bubbles: true}));
    await new Promise(done => setTimeout(done, 200));
    const items = [...document.querySelectorAll('.md-search-result__item')];
    if (items.length) return items.map(item => item.textContent.slice(0, 80));
  }
  return [];
})()
"""


def test_search_works_offline(served, browser):
    """The search box finds pages: its index and worker are files of the site."""
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    browser.send("Page.enable", session)
    browser.send("Page.navigate", session, url=served + "index.html")
    browser.wait_for("Page.loadEventFired", session)
    found = browser.send("Runtime.evaluate", session, expression=SEARCH, awaitPromise=True, returnByValue=True)
    browser.send("Target.closeTarget", targetId=target)
    assert any("Bahdanau" in text or "alignment" in text for text in found["result"]["value"]), found


def test_the_browser_check_fails_on_broken_maths_and_images(site, served, browser):
    """Break a copy of a family page three ways; the check must name each."""
    page = site / "families" / "bahdanau.html"
    html = page.read_text()
    assert page_problems(browser, served + "families/bahdanau.html", served) == []
    image = re.search(r'<img[^>]+src="\.\./([^"]+\.png)"', html).group(1)
    broken = {
        "no_mathjax.html": html.replace("assets/mathjax/tex-chtml.js", "assets/mathjax/missing.js"),
        "bad_tex.html": html.replace(r"\tanh", r"\tanhh", 1),
        "no_image.html": html.replace(image, image.replace(".png", "-missing.png")),
    }
    for name, text in broken.items():
        (site / "families" / name).write_text(text)
    try:
        no_mathjax = page_problems(browser, served + "families/no_mathjax.html", served)
        assert any(p.startswith("not typeset") for p in no_mathjax), no_mathjax
        assert any("missing.js" in p for p in no_mathjax), no_mathjax
        bad_tex = page_problems(browser, served + "families/bad_tex.html", served)
        assert any(p.startswith("TeX error") for p in bad_tex), bad_tex
        no_image = page_problems(browser, served + "families/no_image.html", served)
        assert any(p.startswith("image not loaded") for p in no_image), no_image
    finally:
        for name in broken:
            (site / "families" / name).unlink()
