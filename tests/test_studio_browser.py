"""The studio in a real browser (the system Chromium over the DevTools protocol, as the docs test drives it): type a
sentence, open every view, and check that each plot loaded, the token strip holds the text's tokens, the console
stayed clean and no request left 127.0.0.1.

The Music tab shows a tiny music run trained by the test (where the music extra is installed): draw a sample, find
the audio element playing it and the piano roll, then the surprisal roll of a held-out piece.

The documentation's screenshots come from this test: `HF_SEQ_STUDIO_SCREENSHOTS=docs/studio` writes one per view
there, `HF_SEQ_STUDIO_DEMO=1` shows the `--demo` models (trained for a minute) instead of untrained tiny ones, and
`HF_SEQ_STUDIO_MUSIC=RUN_DIR` a music run folder (`hf-seq train lstm-chorales-tiny`) in the Music tab.
"""

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.test_docs import Browser, session_problems
from tests.test_studio_app import TEXT, free_port, models  # noqa: F401  (the tiny models fixture)

pytestmark = pytest.mark.docs
pytest.importorskip("gradio")

DATE = "Thu, Mar 5, 1998"
# (outer tab, inner tab, the text to type): each view on the first model of its menu
VIEWS = [
    ("predictions", "surprisal", TEXT),
    ("predictions", "compare", TEXT),
    ("predictions", "lineage", TEXT),
    ("predictions", "reach", TEXT),
    ("predictions", "ngram", TEXT),
    ("predictions", "sampling", TEXT),
    ("insides", "recurrent", TEXT),
    ("insides", "attention", TEXT),
    ("insides", "fill", "def [MASK](path):"),
    ("insides", "alignment", DATE),
    ("insides", "cross", DATE),
    ("insides", "ssm", TEXT),
    ("insides", "scan", TEXT),
    ("insides", "mamba2", TEXT),
]

TYPE = """((text) => { const box = document.querySelector('textarea[data-testid="textbox"]');
  box.value = text; box.dispatchEvent(new Event('input', {bubbles: true})); return box.value; })(%r)"""
CLICK_TAB = "document.querySelector('[data-tab-id=\"%s\"]').click()"
VISIBLE = "[...document.querySelectorAll('%s')].filter(e => e.offsetParent !== null)"
PLOT = VISIBLE % '[data-testid="matplotlib"] img' + ".map(img => [img.naturalWidth, img.src.slice(0, 30)])"
SHOW = VISIBLE % "button" + ".filter(b => b.textContent.trim().startsWith('Show'))[0].click()"
STRIP = VISIBLE % '[data-testid="highlighted-text"] .text' + ".map(e => e.textContent)"


@pytest.fixture(scope="module")
def music_models(tmp_path_factory) -> list:
    """The music run the Music tab shows (HF_SEQ_STUDIO_MUSIC's, or a tiny one), or none without the music extra."""
    try:
        import miditok  # noqa: F401
        import symusic  # noqa: F401
    except ImportError:
        return []
    if os.environ.get("HF_SEQ_STUDIO_MUSIC"):
        from hf_seq.studio.app import load

        return [load(os.environ["HF_SEQ_STUDIO_MUSIC"])]
    from tests.test_studio_music import tiny_music_run

    return [tiny_music_run(tmp_path_factory)[0]]


@pytest.fixture(scope="module")
def studio(models, music_models):  # noqa: F811
    from hf_seq.studio.app import OFFLINE, build

    os.environ.update(OFFLINE)
    if os.environ.get("HF_SEQ_STUDIO_DEMO"):
        from hf_seq.studio.demo import demo_models

        models = demo_models(say=lambda *a: None)
    models = [*models, *music_models]
    app = build(models)
    _, url, _ = app.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, ssr_mode=False)
    yield url, models
    app.close()


def tokens_of(loaded_models, kind: str, text: str) -> list[str]:
    """The token strings the first model of `kind` reads in `text` (what its strips show)."""
    from hf_seq.studio.views import encode

    return encode(next(m for m in loaded_models if m.kind == kind), text)[1]


class Page:
    def __init__(self, browser: Browser, url: str):
        self.browser = browser
        target = browser.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable", self.session)
        browser.send("Emulation.setDeviceMetricsOverride", self.session, width=1400, height=1500,
                     deviceScaleFactor=1, mobile=False)  # fmt: skip
        browser.send("Page.navigate", self.session, url=url)
        browser.wait_for("Page.loadEventFired", self.session)
        self.until("document.querySelector('textarea[data-testid=\"textbox\"]') !== null", "the page to render")

    def js(self, expression: str):
        reply = self.browser.send("Runtime.evaluate", self.session, expression=expression, returnByValue=True)
        assert "exceptionDetails" not in reply, reply["exceptionDetails"]
        return reply["result"].get("value")

    def until(self, expression: str, what: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"waited {timeout} s for {what}")

    def screenshot(self, path: Path, whole: bool = False):
        """The window, or with `whole` the whole page (as tall as its content)."""
        import base64

        clip = {}
        if whole:
            height = self.js("document.documentElement.scrollHeight")
            clip = dict(clip={"x": 0, "y": 0, "width": 1400, "height": height, "scale": 1}, captureBeyondViewport=True)
        data = self.browser.send("Page.captureScreenshot", self.session, format="png", **clip)["data"]
        path.write_bytes(base64.b64decode(data))

    def problems(self, origin: str) -> list[str]:
        self.js("1")  # collect the events sent meanwhile
        return session_problems(self.browser, self.session, origin)


def test_every_view_in_a_browser(studio, tmp_path):
    from hf_seq.studio import tokens
    from hf_seq.studio.views import view_kinds

    url, shown_models = studio
    browser = Browser(tmp_path / "profile")
    shots = Path(os.environ.get("HF_SEQ_STUDIO_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    try:
        page = Page(browser, url)
        for outer, inner, text in VIEWS:
            page.js(CLICK_TAB % outer)
            page.js(CLICK_TAB % inner)
            page.until(VISIBLE % "button" + ".some(b => b.textContent.trim().startsWith('Show'))", f"{inner}'s button")
            assert page.js(TYPE % text) == text
            before = json.dumps(json.dumps(page.js(PLOT)))  # a JS string literal of the plots shown so far
            page.js(SHOW)
            changed = (
                f"(() => {{ const now = {PLOT}; return JSON.stringify(now) !== {before} && now.length && now; }})()"
            )
            loaded = page.until(changed, f"the {inner} plot")
            assert loaded[0][0] > 100, (inner, loaded)  # a drawn figure, not an icon
            if inner == "recurrent":  # the text coloured by one unit
                assert page.until(STRIP, "the unit's strip") == tokens_of(shown_models, "rnn", text)
            if inner == "attention":  # click a query token: its keys light up in the second strip
                page.until(STRIP, "the query strip")
                page.js(VISIBLE % '[data-testid="highlighted-text"] .token' + "[2].click()")
                lit = page.until(f"{STRIP}.length > {len(tokens_of(shown_models, 'gpt', text))} && {STRIP}",
                                 "the keys of the clicked query")  # fmt: skip
                assert lit[len(lit) // 2 :] == tokens_of(shown_models, "gpt", text)
            if inner == "alignment":  # one target word per click
                before = json.dumps(json.dumps(page.js(PLOT)))
                page.js(VISIBLE % "button" + ".find(b => b.textContent.trim() === 'Next word').click()")
                page.until(f"JSON.stringify({PLOT}) !== {before}", "the first word's alignment")
            if inner == "surprisal":
                shown = page.until(STRIP, "the token strip")
                first = next(m for m in shown_models if m.kind in view_kinds("language_model"))  # the menu's first
                assert shown == tokens.surprisal(first, text)["tokens"]
            page.screenshot(shots / f"{inner}.png")
        music = any(m.music for m in shown_models)
        if music:
            music_view(page, url, shots)
        assert page.problems(url.rstrip("/")) == []
    finally:
        browser.close()
    assert len(list(shots.glob("*.png"))) == len(VIEWS) + music


# Gradio's player: an <audio> element (data-testid audio-player-<label>) beside a waveform that fetches the file
AUDIO = "[...document.querySelectorAll('audio[data-testid^=\"audio-player\"]')].length"
WAV = "performance.getEntriesByType('resource').map(e => e.name).filter(name => name.endsWith('.wav'))"


def music_view(page: Page, url: str, shots: Path) -> None:
    """The Music tab: Sample draws the piano roll and gives the audio player the sample's sound (a WAV file the page
    serves); Show surprisal draws the held-out piece coloured by bits."""
    import urllib.request

    page.js(CLICK_TAB % "music")
    page.until(VISIBLE % "button" + ".some(b => b.textContent.trim() === 'Sample')", "the Sample button")
    page.js(VISIBLE % "button" + ".find(b => b.textContent.trim() === 'Sample').click()")
    roll = page.until(f"(() => {{ const now = {PLOT}; return now.length && now; }})()", "the sample's piano roll")
    assert roll[0][0] > 100, roll
    assert page.until(AUDIO, "the audio element") == 1
    sources = page.until(f"{WAV}.length && {WAV}", "the waveform to fetch the sound")
    assert all(src.startswith(url.rstrip("/")) for src in sources), sources  # the sound is served by the page
    assert urllib.request.urlopen(sources[0]).read(4) == b"RIFF"  # a WAV file
    page.js(VISIBLE % "button" + ".find(b => b.textContent.trim() === 'Show surprisal').click()")
    rolls = page.until(f"(() => {{ const now = {PLOT}; return now.length == 2 && now; }})()", "the surprisal roll")
    assert rolls[1][0] > 100, rolls
    page.screenshot(shots / "music.png", whole=True)


def test_the_check_fails_on_a_request_outside(studio, tmp_path):
    """The problem list is not blind: a request to another host is reported."""
    url, _ = studio
    browser = Browser(tmp_path / "profile")
    try:
        page = Page(browser, url)
        page.js("fetch('http://192.0.2.1/x').catch(() => null); 1")
        time.sleep(0.5)
        assert any("request outside the site: http://192.0.2.1/x" in p for p in page.problems(url.rstrip("/")))
    finally:
        browser.close()
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
