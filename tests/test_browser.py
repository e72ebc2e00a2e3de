"""The built book in headless Chromium at 1280 px: every page in _toc.yml loads with no console
error, no missing image and no broken internal link; no code block or cell output is wider than
its box or clipped; no table is wider than the article column or has cells without side padding;
and no page shows a phrase from the project's internal notes. The in-page contents, which the
book's stylesheet moves into a drawer, open from their button. The index, one stage page and one
composition page are saved as screenshots under _build/screenshots/.

Needs the built site (`make book`; BOOK_HTML may point at another build) and Debian's chromium and
chromedriver (`make browser` installs them). `make test` builds the book before it runs pytest.
"""
import collections
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
# Pages saved as screenshots besides the index: a stage chapter and the last composition chapter.
SHOT_PAGES = ("stages/02_conv1d_decode", "book/composition/05_two_cores")
# A common laptop width, where the theme shows its desktop layout (the navigation as a column);
# tall enough for the screenshots to show a chapter's title, prose and first code and figure.
WINDOW = (1280, 2000)
# Phrases of the team's internal notes that must not reach a reader (matched case-insensitively).
LEAKED_PHRASES = ("the issue sets", "the issue asks", "the issue says", "production kernel",
                  "reference/gdn-math", "reference/nki-api", "gdn-math.md", "nki-api.md",
                  "DESIGN.md")
# Side padding (px) below which a table cell counts as unpadded: the browser's own default is 1 px,
# which leaves the numbers of neighbouring columns running together ("1 20483088").
MIN_CELL_PADDING = 4

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
# Layout faults in the article column (the theme's .bd-article; the whole body elsewhere):
# - a code block (pre) or cell output whose content is wider than its box, reported only for the
#   innermost such element (a pre that overflows makes its output overflow too), or whose box
#   sticks out of the article column or out of an ancestor that clips or scrolls it;
# - a table wider than the article column, or clipped by an ancestor;
# - a table with a cell whose left or right padding is below arguments[0] px.
# Elements are named by kind and number on the page, section id and first line of text.
LAYOUT_JS = r"""
const article = document.querySelector(".bd-article") || document.body;
const style = getComputedStyle(article), box = article.getBoundingClientRect();
const columnLeft = box.left + article.clientLeft + parseFloat(style.paddingLeft);
const columnRight = box.left + article.clientLeft + article.clientWidth
  - parseFloat(style.paddingRight);
const px = x => `${Math.round(x)} px`;
const name = (el, kind, number) => {
  const section = el.closest("section[id]");
  const line = (el.innerText || el.textContent || "").trim().split("\n")[0]
    .replace(/\s+/g, " ").trim().slice(0, 60);
  return `${kind} ${number}` + (section ? ` in #${section.id}` : "") + (line ? ` ("${line}")` : "");
};
const tag = el => el.tagName.toLowerCase() + Array.from(el.classList, c => "." + c).join("");
// How el's box leaves the column or the visible area of an ancestor that clips or scrolls.
const escape = el => {
  const r = el.getBoundingClientRect();
  for (let a = el.parentElement; a && a !== article; a = a.parentElement) {
    const overflow = getComputedStyle(a).overflowX;
    if (overflow === "visible") continue;
    const ab = a.getBoundingClientRect(), left = ab.left + a.clientLeft;
    const past = Math.max(r.right - (left + a.clientWidth), left - r.left);
    if (past > 1) {
      const how = overflow === "auto" || overflow === "scroll" ? "scrolls sideways inside"
                                                                : "is clipped by";
      return `${how} ${tag(a)} (${px(past)} past its edge)`;
    }
  }
  const past = Math.max(r.right - columnRight, columnLeft - r.left);
  return past > 1 ? `sticks out of the article column by ${px(past)}` : null;
};
const problems = [];
const blocks = Array.from(article.querySelectorAll("pre, .cell_output, .cell_output .output"));
const wide = blocks.filter(el => el.scrollWidth > el.clientWidth + 1);
const pres = Array.from(article.querySelectorAll("pre"));
const outputs = Array.from(article.querySelectorAll(".cell_output"));
for (const el of blocks) {  // a .output inside a .cell_output is named after the latter
  const label = el.tagName === "PRE" ? name(el, "code block", pres.indexOf(el) + 1)
    : name(el, "cell output", outputs.indexOf(el.closest(".cell_output")) + 1);
  if (wide.includes(el) && !wide.some(other => other !== el && el.contains(other))) {
    const overflow = getComputedStyle(el).overflowX;
    const shown = overflow === "visible" ? "spills out"
      : overflow === "hidden" || overflow === "clip" ? "is clipped" : "scrolls sideways";
    problems.push(`${label}: content ${px(el.scrollWidth)} wide in a ${px(el.clientWidth)} box `
                  + `(${shown})`);
  }
  const out = escape(el);
  if (out) problems.push(`${label}: ${out}`);
}
Array.from(article.querySelectorAll("table")).forEach((table, i) => {
  const label = name(table, "table", i + 1), width = table.getBoundingClientRect().width;
  if (width > columnRight - columnLeft + 1) {
    problems.push(`${label}: ${px(width)} wide, wider than the ${px(columnRight - columnLeft)}`
                  + " article column");
  } else {
    const out = escape(table);
    if (out && !out.startsWith("scrolls")) problems.push(`${label}: ${out}`);
  }
  const cells = Array.from(table.querySelectorAll("th, td"))
    .filter(cell => cell.closest("table") === table);  // not those of a nested table
  const bare = cells.filter(c => {
    const cs = getComputedStyle(c);
    return Math.min(parseFloat(cs.paddingLeft), parseFloat(cs.paddingRight)) < arguments[0];
  });
  if (bare.length) {
    problems.push(`${label}: ${bare.length} of ${cells.length} cells have less than `
                  + `${px(arguments[0])} of left or right padding`);
  }
});
return problems;
"""
# Presses the visible button of the in-page contents (book.css moves them into a drawer) and
# returns how many links the drawer that opened holds; 0 when no drawer opened.
OPEN_CONTENTS_JS = """
const button = Array.from(document.querySelectorAll("button.secondary-toggle"))
  .find(b => b.offsetParent !== null);
if (!button) return 0;
button.click();
const drawer = document.querySelector("dialog.bd-sidebar-secondary[open]");
return drawer ? drawer.querySelectorAll("nav.page-toc a").length : 0;
"""
# The page's text as a reader can get to it: the rendered text plus what collapsed cells and
# dropdowns hold, without scripts and styles. (Walks the text nodes: a copy of the page would
# load its images again and log their errors under the next page.)
TEXT_JS = r"""
const skip = "script, style, noscript, template";
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {acceptNode:
  node => node.parentElement.closest(skip) ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
const parts = [];
while (walker.nextNode()) parts.push(walker.currentNode.nodeValue);
return parts.join("").replace(/\s+/g, " ");
"""


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


def leaks(text):
    """One line per phrase of LEAKED_PHRASES found in `text`: how often, and where first."""
    found, lower = [], text.lower()
    for phrase in LEAKED_PHRASES:
        at = lower.find(phrase.lower())
        if at >= 0:
            context = text[max(0, at - 40):at + len(phrase) + 40].strip()
            found.append(f"leaked phrase {phrase!r} ({lower.count(phrase.lower())}x), first in "
                         f"\"...{context}...\"")
    return found


def check_site(driver, base_url, pages):
    """Loads each page (a path without extension) of the site at `base_url` and returns every
    failure as "page: problem", sorted by page: a page missing from the site, a SEVERE console
    message (a JS error, a resource that failed to load), an image that did not load, a broken
    internal link, a layout fault (LAYOUT_JS) or a leaked phrase (LEAKED_PHRASES)."""
    # Chromium asks a new site for /favicon.ico by itself and logs the 404 when there is none.
    # The book names no icon, so that is the browser's own request, not a fault of a page.
    favicon = f"{base_url}favicon.ico "
    failures, fetch = [], functools.cache(_fetch)
    driver.get_log("browser")  # drop what an earlier page left in the log
    for page in pages:
        status, _ = fetch(f"{base_url}{page}.html")
        if status != 200:
            failures.append((page, f"page not in the built site (HTTP {status})"))
            continue
        load(driver, f"{base_url}{page}.html")
        problems = [f"console: {entry['message']}" for entry in driver.get_log("browser")
                    if entry["level"] == "SEVERE" and not entry["message"].startswith(favicon)]
        problems += [f"image did not load: {src}"
                     for src in driver.execute_script(BROKEN_IMAGES_JS)]
        problems += link_failures(base_url, driver.execute_script(LINKS_JS), fetch)
        problems += driver.execute_script(LAYOUT_JS, MIN_CELL_PADDING)
        problems += leaks(driver.execute_script(TEXT_JS))
        failures += [(page, problem) for problem in problems]
    failures.sort(key=lambda failure: failure[0])  # stable: each page's problems keep their order
    return [f"{page}: {problem}" for page, problem in failures]


def report(failures):
    """The failure message: a count per page, then every failure."""
    counts = collections.Counter(failure.split(":", 1)[0] for failure in failures)
    summary = [f"  {count:4d}  {page}" for page, count in sorted(counts.items())]
    return "\n".join([f"{len(failures)} problem(s) on {len(counts)} page(s) of the built book at "
                      f"{SITE}:", *summary, "", *failures])


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
        for page in (pages[0], *SHOT_PAGES):
            load(driver, f"{base_url}{page}.html")
            name = "index" if page == pages[0] else page.replace("/", "_")
            driver.save_screenshot(str(SHOTS / f"{name}.png"))
    if failures:
        pytest.fail(report(failures), pytrace=False)


def test_contents_drawer_opens(driver):
    """At 1280 px the in-page contents live in a drawer (book/_static/book.css): its button must
    be shown and must open it, with a link per section."""
    if not (SITE / "index.html").is_file():
        pytest.fail(f"no built site at {SITE}: run `make book` first", pytrace=False)
    with serve(SITE) as base_url:
        load(driver, f"{base_url}{SHOT_PAGES[0]}.html")
        links = driver.execute_script(OPEN_CONTENTS_JS)
    assert links > 0, f"{SHOT_PAGES[0]}: no visible contents button opens the contents drawer"


# The synthetic pages' article column: 600 px of content, as the book's theme marks it.
SYNTHETIC_PAGE = ('<html><head><style>body {{ margin: 0 }} td, th {{ padding: 6px }}'
                  '.bd-article {{ width: 600px; padding: 0 20px }}</style></head>'
                  '<body><article class="bd-article">{}</article></body></html>')
LONG_LINE = "x = 1  # " + "long comment " * 20


def test_checker_reports_each_failure(driver, tmp_path):
    """The checker on a tiny synthetic site: pages with every kind of fault, a clean one, and
    one that the table of contents names but the site lacks."""
    (tmp_path / "dot.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="8" '
                                      'height="8"><rect width="8" height="8"/></svg>')
    (tmp_path / "clean.html").write_text(SYNTHETIC_PAGE.format(
        '<h1 id="top-title">Clean</h1><img src="dot.svg">'
        '<a href="broken.html">a page</a> <a href="#top-title">this page</a>'
        '<p>An issue was set; the kernel for production use is another design.</p>'
        '<section id="fits"><pre>x = 1</pre><div class="cell_output"><div class="output">'
        '<pre>1 2048</pre></div></div><table><tr><th>B</th><td>2048</td></tr></table></section>'))
    (tmp_path / "broken.html").write_text(
        '<html><body><img src="missing.png">'
        '<a href="nowhere.html">missing page</a> <a href="clean.html#no-such-id">missing id</a>'
        '<script>console.error("logged-error")</script>'
        '<script>throw new Error("thrown-error")</script></body></html>')
    (tmp_path / "crowded.html").write_text(SYNTHETIC_PAGE.format(
        f'<section id="scrolls"><pre style="overflow: auto">{LONG_LINE}</pre></section>'
        f'<section id="hidden"><pre style="overflow: hidden">{LONG_LINE}</pre></section>'
        f'<section id="spills"><div class="cell_output"><div class="output">'
        f'<p style="white-space: nowrap">{LONG_LINE}</p></div></div></section>'
        '<section id="cut"><div style="overflow: hidden; width: 300px">'
        '<pre style="width: 500px">short</pre></div></section>'
        '<section id="out"><pre style="width: 800px; margin: 0">short</pre></section>'
        '<section id="wide-table"><div style="overflow-x: auto"><table style="width: 900px">'
        '<tr><td>a</td></tr></table></div></section>'
        '<section id="bare-table"><table><tr><td style="padding: 0">1</td>'
        '<td style="padding: 1px">2048</td></tr></table></section>'
        '<section id="cut-table"><div style="overflow: hidden; width: 100px">'
        '<table style="width: 300px"><tr><td>b</td></tr></table></div></section>'))
    (tmp_path / "leaky.html").write_text(SYNTHETIC_PAGE.format(
        '<p>The issue <em>sets</em> a rule, the issue asks for more, THE ISSUE SAYS so.</p>'
        '<p>Like the production kernel: see reference/gdn-math.md, reference/nki-api.md.</p>'
        '<details><summary>more</summary>DESIGN.md</details><p>design.md</p>'
        '<script>const note = "production kernel";</script>'))
    with serve(tmp_path) as base_url:
        failures = check_site(driver, base_url, ["clean", "leaky", "broken", "crowded", "unbuilt"])
    text = "\n".join(failures)
    assert not [f for f in failures if f.startswith("clean:")], text
    assert [f.split(":")[0] for f in failures] == sorted(f.split(":")[0] for f in failures), text
    expected = {  # what: (page, text a line reported for that page contains)
        "missing image": ("broken", "image did not load: missing.png"),
        "its 404 in the console": ("broken", f"console: {base_url}missing.png"),
        "missing page": ("broken", "link to nowhere.html: HTTP 404"),
        "missing fragment": ("broken",
                             "link to clean.html#no-such-id: no element with id 'no-such-id'"),
        "console.error": ("broken", "logged-error"),
        "thrown error": ("broken", "Uncaught Error: thrown-error"),
        "code that scrolls": ("crowded", 'code block 1 in #scrolls ("x = 1 # long comment'),
        "... sideways": ("crowded", "px box (scrolls sideways)"),
        "code that is clipped": ("crowded", "code block 2 in #hidden"),
        "... by itself": ("crowded", "px box (is clipped)"),
        "output that spills": ("crowded", "cell output 1 in #spills"),
        "... out": ("crowded", "px box (spills out)"),
        "code clipped by its parent": ("crowded", 'code block 3 in #cut ("short"): is clipped by '
                                                  "div (200 px past its edge)"),
        "code out of the column": ("crowded", "code block 4 in #out (\"short\"): sticks out of "
                                              "the article column by 200 px"),
        "wide table": ("crowded", 'table 1 in #wide-table ("a"): 900 px wide, wider than the '
                                  "600 px article column"),
        "unpadded table": ("crowded", "table 2 in #bare-table (\"1 2048\"): 2 of 2 cells have "
                                      "less than 4 px of left or right padding"),
        "clipped table": ("crowded", 'table 3 in #cut-table ("b"): is clipped by div'),
        "split phrase, any case": ("leaky", "leaked phrase 'the issue sets' (1x)"),
        "phrase": ("leaky", "leaked phrase 'the issue asks' (1x)"),
        "upper case": ("leaky", "leaked phrase 'the issue says' (1x)"),
        "script text is not read": ("leaky", "leaked phrase 'production kernel' (1x)"),
        "path": ("leaky", "leaked phrase 'reference/gdn-math' (1x)"),
        "path too": ("leaky", "leaked phrase 'reference/nki-api' (1x)"),
        "file": ("leaky", "leaked phrase 'gdn-math.md' (1x)"),
        "file too": ("leaky", "leaked phrase 'nki-api.md' (1x)"),
        "collapsed text is read": ("leaky", "leaked phrase 'DESIGN.md' (2x)"),
        "missing page in the site": ("unbuilt", "page not in the built site (HTTP 404)"),
    }
    missed = [what for what, (page, needle) in expected.items()
              if not any(f.startswith(f"{page}: ") and needle in f for f in failures)]
    assert not missed, f"checker missed {missed}; it reported:\n{text}"
