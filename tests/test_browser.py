"""The built book in headless Chromium (issue 9): every page in _toc.yml loads with no console
error, no missing image and no broken internal link, and the index and one stage page are saved
as screenshots under _build/screenshots/.

Needs the built site (`make book`; BOOK_HTML may point at another build) and Debian's chromium and
chromedriver (`make browser` installs them). `make test` builds the book before it runs pytest.
"""
import functools
import http.server
import os
import shutil
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

REPO = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("BOOK_HTML", REPO / "_build" / "html"))
SHOTS = SITE.parent / "screenshots"  # _build/screenshots next to _build/html
# The stage page the issue asks for a screenshot of, besides the index.
STAGE_PAGE = "stages/02_conv1d_decode"
# Wide enough for the theme's desktop layout (sidebar, page, table of contents column); tall
# enough for the screenshots to show a chapter's title, prose and first figure.
WINDOW = (1280, 2000)

# Runs in the page after it loaded: waits for MathJax's first typeset and the web fonts, so a font
# or MathJax error is logged before the console is read, and the screenshot shows rendered math.
SETTLE_JS = """
const done = arguments[arguments.length - 1];
const mathjax = window.MathJax && window.MathJax.startup ? window.MathJax.startup.promise : null;
Promise.resolve(mathjax).then(() => document.fonts.ready).then(() => done(), () => done());
"""
# Images that did not load (missing file, undecodable data); `complete` alone is true for both.
BROKEN_IMAGES_JS = """
return Array.from(document.images)
  .filter(img => !(img.complete && img.naturalWidth > 0))
  .map(img => img.getAttribute("src"));
"""
# Resolved (absolute) targets of the page's links, sidebar and in-page anchors included.
LINKS_JS = "return Array.from(document.querySelectorAll('a[href]'), a => a.href);"


def toc_pages(toc_file):
    """Page paths (no extension) in `toc_file`, in reading order: the root, then every `file:`."""
    def files(entries):
        for entry in entries:
            if "file" in entry:
                yield entry["file"]
            for key in ("parts", "chapters", "sections"):
                yield from files(entry.get(key, []))

    toc = yaml.safe_load(Path(toc_file).read_text())
    return [toc["root"], *files([toc])]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test reports failures itself; keep pytest's output clean
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # Chromium drops connections it no longer needs (a page left while loading): not a fault.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def serve(root):
    """Serve folder `root` over HTTP on an ephemeral port of 127.0.0.1; yields the base URL."""
    handler = functools.partial(_Quiet, directory=str(root))
    with _Server(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/"
        finally:
            server.shutdown()
            thread.join()


class _Anchors(HTMLParser):
    """Collects the names a `#fragment` can point at: element ids and <a name=...>."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def handle_starttag(self, tag, attrs):
        self.names.update(v for k, v in attrs if k == "id" or (tag == "a" and k == "name"))


def _fetch(url):
    """(HTTP status, anchor names or None if the target is not HTML) of `url`."""
    try:
        with urllib.request.urlopen(url) as response:
            if response.headers.get_content_type() != "text/html":
                return response.status, None
            parser = _Anchors()
            parser.feed(response.read().decode("utf-8", errors="replace"))
            return response.status, parser.names
    except urllib.error.HTTPError as error:
        return error.code, None


def link_failures(base_url, links, fetch):
    """Why each internal link in `links` is broken: its target is missing or lacks its fragment.
    `fetch` is _fetch, cached across pages (the sidebar repeats on each)."""
    failures = []
    for link in dict.fromkeys(links):  # once each, in page order
        if not link.startswith(base_url):
            continue  # external: not this test's business (the book is built offline)
        target, fragment = urllib.parse.urldefrag(link)
        fragment = urllib.parse.unquote(fragment)
        status, names = fetch(target)
        shown = link[len(base_url):]
        if status != 200:
            failures.append(f"link to {shown}: HTTP {status}")
        elif fragment and names is not None and fragment not in names:
            failures.append(f"link to {shown}: no element with id {fragment!r}")
    return failures


def load(driver, url):
    """Opens `url` and waits until it is rendered (see SETTLE_JS)."""
    driver.get(url)
    driver.execute_async_script(SETTLE_JS)


def check_site(driver, base_url, pages):
    """Loads each page (a path without extension) of the site at `base_url` and returns every
    failure, each prefixed with its page: a page missing from the site, a SEVERE console message
    (a JS error, a resource that failed to load), an image that did not load, or a broken internal
    link."""
    # Chromium asks a new site for /favicon.ico by itself and logs the 404 when there is none.
    # The book names no icon, so that is the browser's own request, not a fault of a page.
    favicon = f"{base_url}favicon.ico "
    failures, fetch = [], functools.cache(_fetch)
    driver.get_log("browser")  # drop what an earlier page left in the log
    for page in pages:
        status, _ = fetch(f"{base_url}{page}.html")
        if status != 200:
            failures.append(f"{page}: page not in the built site (HTTP {status})")
            continue
        load(driver, f"{base_url}{page}.html")
        problems = [f"console: {entry['message']}" for entry in driver.get_log("browser")
                    if entry["level"] == "SEVERE" and not entry["message"].startswith(favicon)]
        problems += [f"image did not load: {src}"
                     for src in driver.execute_script(BROKEN_IMAGES_JS)]
        problems += link_failures(base_url, driver.execute_script(LINKS_JS), fetch)
        failures += [f"{page}: {problem}" for problem in problems]
    return failures


@pytest.fixture(scope="module")
def driver():
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        pytest.fail("the browser test needs Debian's chromium and chromedriver on PATH; "
                    "`make browser` installs them (apt packages chromium, chromium-driver)",
                    pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new",
                     "--no-sandbox",             # Chromium refuses to run as root otherwise
                     "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
                     "--hide-scrollbars"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium Manager (which downloads drivers) never runs; no internet.
    chrome = webdriver.Chrome(options=options, service=Service(chromedriver))
    # The viewport itself is WINDOW (--window-size would include the window's frame).
    chrome.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False})
    chrome.set_page_load_timeout(30)
    chrome.set_script_timeout(30)
    yield chrome
    chrome.quit()


def test_every_page_renders(driver):
    if not (SITE / "index.html").is_file():
        pytest.fail(f"no built site at {SITE}: run `make book` first", pytrace=False)
    pages = toc_pages(REPO / "_toc.yml")
    with serve(SITE) as base_url:
        failures = check_site(driver, base_url, pages)
        SHOTS.mkdir(parents=True, exist_ok=True)
        # index.html only redirects to the root page: shoot the root page itself.
        for page in (pages[0], STAGE_PAGE):
            load(driver, f"{base_url}{page}.html")
            name = "index" if page == pages[0] else page.replace("stages/", "stage_")
            driver.save_screenshot(str(SHOTS / f"{name}.png"))
    if failures:
        pytest.fail(f"{len(failures)} problem(s) in the built book at {SITE}:\n"
                    + "\n".join(failures), pytrace=False)


def test_checker_reports_each_failure(driver, tmp_path):
    """The checker on a tiny synthetic site: a page with every kind of fault, a clean one, and
    one that the table of contents names but the site lacks."""
    (tmp_path / "dot.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8">'
                                      '<rect width="8" height="8"/></svg>')
    (tmp_path / "clean.html").write_text(
        '<html><body><h1 id="top-title">Clean</h1><img src="dot.svg">'
        '<a href="broken.html">a page</a> <a href="#top-title">this page</a></body></html>')
    (tmp_path / "broken.html").write_text(
        '<html><body><img src="missing.png">'
        '<a href="nowhere.html">missing page</a> <a href="clean.html#no-such-id">missing id</a>'
        '<script>console.error("logged-error")</script>'
        '<script>throw new Error("thrown-error")</script></body></html>')
    with serve(tmp_path) as base_url:
        failures = check_site(driver, base_url, ["clean", "broken", "unbuilt"])
    text = "\n".join(failures)
    assert not [f for f in failures if f.startswith("clean:")], text
    expected = {  # each must be reported for the broken page, in a line that contains this text
        "missing image": "image did not load: missing.png",
        "its 404 in the console": f"console: {base_url}missing.png",
        "missing page": "link to nowhere.html: HTTP 404",
        "missing fragment": "link to clean.html#no-such-id: no element with id 'no-such-id'",
        "console.error": "logged-error",
        "thrown error": "Uncaught Error: thrown-error",
    }
    missed = [what for what, needle in expected.items()
              if not any(f.startswith("broken: ") and needle in f for f in failures)]
    if "unbuilt: page not in the built site (HTTP 404)" not in failures:
        missed.append("page in the table of contents but not in the site")
    assert not missed, f"checker missed {missed}; it reported:\n{text}"
