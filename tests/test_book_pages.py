"""The book's pages stay readable, measured on their sources: prose words per page and in all, code
a reader sees outside the listings a page teaches from, no long paragraph said on three pages, and
every notebook chapter opening with what it teaches and closing with takeaways. And measured on the
built site (_build/html, or BOOK_HTML): the words of every page as a reader sees them, tables and
generated lists included (see `rendered_words`); those tests skip when the book is not built.

Prose: the Markdown of a page outside code fences, directive options and tables. Visible code: the
non-blank source lines of code cells not tagged remove-input, hide-input or remove-cell.
"""
import collections
import json
import os
import re
from pathlib import Path

import pytest
import yaml
from bs4 import BeautifulSoup   # installed with the book's theme (pydata-sphinx-theme needs it)

REPO = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("BOOK_HTML", REPO / "_build" / "html"))
MAX_PAGE_WORDS = 5000
MAX_BOOK_WORDS = 50000
MAX_VISIBLE_CODE_LINES = 150
LONG_PARAGRAPH = 150          # characters
MAX_PAGES_PER_PARAGRAPH = 2
HIDDEN = {"remove-input", "hide-input", "remove-cell"}


def toc_pages():
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    pages = [toc["root"]]
    todo = list(toc.get("parts", [])) + list(toc.get("chapters", []))
    while todo:
        entry = todo.pop(0)
        if "file" in entry:
            pages.append(entry["file"])
        for key in ("parts", "chapters", "sections"):
            todo[0:0] = entry.get(key, [])
    return pages


def source(page):
    for ext in (".ipynb", ".md"):
        path = REPO / (page + ext)
        if path.exists():
            return path
    raise FileNotFoundError(page)


def paragraphs(markdown):
    """Prose paragraphs of Markdown: code fences (```), directive options and tables out; the text
    inside colon fences (:::{dropdown}, :::{note}) counts, since a reader opens it."""
    out, fence = [], None
    for block in re.split(r"\n\s*\n", markdown):
        lines = []
        for line in block.splitlines():
            s = line.strip()
            ticks = re.match(r"^`{3,}", s)
            if fence:
                fence = None if s == fence else fence
                continue
            if ticks:
                fence = ticks.group(0)
                continue
            if re.match(r"^:{3,}", s) or re.match(r"^:[\w-]+:", s) or s.startswith("|"):
                continue
            lines.append(s)
        text = " ".join(lines).strip()
        if text:
            out.append(text)
    return out


def page_parts(page):
    """(prose paragraphs, visible code lines, markdown text) of one page."""
    path = source(page)
    if path.suffix == ".md":
        text = path.read_text()
        return paragraphs(text), 0, text
    paras, code, text = [], 0, []
    for cell in json.loads(path.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            paras += paragraphs(src)
            text.append(src)
        elif cell["cell_type"] == "code" and not HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
            code += sum(1 for line in src.splitlines() if line.strip())
    return paras, code, "\n\n".join(text)


def words(paras):
    return sum(len(re.findall(r"[A-Za-z0-9][\w'.,-]*", p)) for p in paras)


PAGES = toc_pages()


@pytest.mark.parametrize("page", PAGES)
def test_page_is_short(page):
    paras, code, _ = page_parts(page)
    assert words(paras) <= MAX_PAGE_WORDS, f"{page}: {words(paras)} words of prose > {MAX_PAGE_WORDS}"
    assert code <= MAX_VISIBLE_CODE_LINES, f"{page}: {code} visible code lines > {MAX_VISIBLE_CODE_LINES}"


def test_book_is_short():
    total = sum(words(page_parts(p)[0]) for p in PAGES)
    assert total <= MAX_BOOK_WORDS, f"{total} words of prose in the book > {MAX_BOOK_WORDS}"


def test_no_long_paragraph_on_three_pages():
    seen = collections.defaultdict(set)
    for page in PAGES:
        for p in page_parts(page)[0]:
            if len(p) >= LONG_PARAGRAPH:
                seen[p].add(page)
    repeated = {p[:80]: sorted(s) for p, s in seen.items() if len(s) > MAX_PAGES_PER_PARAGRAPH}
    assert not repeated, f"said on three or more pages (link to one instead): {repeated}"


CHAPTERS = [p for p in PAGES[1:] if source(p).suffix == ".ipynb"]     # the landing page aside


@pytest.mark.parametrize("page", CHAPTERS)
def test_chapter_says_what_it_teaches_and_what_to_keep(page):
    text = page_parts(page)[2]
    assert re.search(r"^(#+|:{3,}\{admonition\}) What you will learn", text, re.M), \
        f"{page}: no 'What you will learn' section or box"
    assert re.search(r"^#+ Takeaways", text, re.M), f"{page}: no 'Takeaways' section"


def test_paragraph_parser_skips_code_and_tables():
    md = ("Intro words here.\n\n```python\nx = 1\n\ny = 2\n```\n\n| a | b |\n|---|---|\n\n"
          ":::{dropdown} Answer\n:open:\nOpened text.\n:::\n")
    assert paragraphs(md) == ["Intro words here.", "Opened text."]


# -- words as a reader sees them, on the built site -------------------------------------------------

# Removed before counting: code blocks (code cells' sources, and outputs printed as text or
# tracebacks, all <pre>), the inputs of code cells with their "Show code cell source" toggles, and
# what a reader never sees as text (scripts, styles, the "#" links beside headings).
NOT_READ = "pre, div.cell_input, details.above-input, script, style, noscript, template, a.headerlink"
# One formula counts as one word, inline or displayed: its LaTeX source is no measure of reading.
FORMULA = "span.math, div.math, mjx-container"
# Elements whose text is a block of its own: a space on each side keeps the words of neighbouring
# cells, items and paragraphs apart (inline markup such as <em> or <code> adds none).
BLOCKS = ("address article aside blockquote br caption dd details div dl dt figcaption figure "
          "footer h1 h2 h3 h4 h5 h6 header hr li nav ol p section summary table td th tr ul").split()


def rendered_words(html):
    """Words of a built page as a reader sees them: the visible text of the article body (the
    theme's article.bd-article: title, prose, tables, lists, admonitions, figure captions and
    Markdown a cell displays), without code blocks and text outputs (NOT_READ). Inline code in a
    sentence counts, as the words it is. A formula counts as one word (FORMULA). A closed dropdown
    (an exercise's answer, a chapter's full table) counts its title only: a reader sees its text
    after choosing to open it; an open one counts whole. Outputs behind a toggle count. Image alt
    text does not count. A word is a whitespace-separated token with at least one letter or digit, so "368 GB/s"
    is two words and a lone "—" or "|" none."""
    soup = BeautifulSoup(html, "html.parser")
    article = soup.select_one("article.bd-article") or soup.body or soup
    for el in article.select(NOT_READ):
        el.decompose()
    for el in article.select("details.sd-dropdown:not([open])"):
        for child in el.find_all(recursive=False):
            if child.name != "summary":
                child.decompose()
    for el in article.select(FORMULA):
        el.replace_with(" formula ")
    for el in article.find_all(BLOCKS):
        el.insert_before(" ")
        el.insert_after(" ")
    return sum(1 for token in article.get_text().split() if re.search(r"[^\W_]", token))


def words_table(counts):
    """Words per page, largest first, and the total."""
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return "\n".join([f"{'words':>7}  page", *(f"{n:7d}  {page}" for page, n in rows),
                      f"{sum(counts.values()):7d}  the whole book"])


@pytest.fixture(scope="module")
def site_words():
    """{page: words as rendered} for every page of _toc.yml; skips when the book is not built."""
    if not (SITE / "index.html").is_file():
        pytest.skip(f"no built site at {SITE}: run `make book` first")
    missing = [page for page in PAGES if not (SITE / f"{page}.html").is_file()]
    assert not missing, f"pages of _toc.yml missing from the built site at {SITE}: {missing}"
    return {page: rendered_words((SITE / f"{page}.html").read_text(encoding="utf-8"))
            for page in PAGES}


def test_rendered_pages_are_short(site_words):
    """No page renders more than MAX_PAGE_WORDS words; the message names each page over it and
    tabulates every page."""
    long = {page: n for page, n in site_words.items() if n > MAX_PAGE_WORDS}
    assert not long, (f"{len(long)} page(s) over {MAX_PAGE_WORDS} words as rendered: "
                      + ", ".join(f"{page} ({n})" for page, n in sorted(long.items(),
                                                                          key=lambda i: -i[1]))
                      + "\n\n" + words_table(site_words))


def test_rendered_book_is_short(site_words):
    """The whole book renders fewer than MAX_BOOK_WORDS words."""
    total = sum(site_words.values())
    assert total < MAX_BOOK_WORDS, (f"the book renders {total} words, {MAX_BOOK_WORDS} or more\n\n"
                                    + words_table(site_words))


def test_rendered_word_counter():
    """What counts, on a small page: article text, tables, captions, an open dropdown and a closed
    one's title; not a closed dropdown's text, code, text outputs, the headings' links, alt text
    or what lies outside the article."""
    page = """<html><body><nav>Sidebar words</nav><article class="bd-article">
      <section id="t"><h1>A title<a class="headerlink" href="#t">#</a></h1>
      <p>One <code class="docutils literal"><span class="pre">nisa.dma_copy</span></code> at
      368&nbsp;GB/s, <em>em</em>phasis — and <span class="math">\\(x_t + 1\\)</span>.</p>
      <div class="math">\\[ S_t = S_{t-1} \\]</div>
      <table><tr><td>1</td><td>2048</td></tr></table><ul><li>item</li><li>two</li></ul>
      <figure><img alt="alt text is not read"><figcaption><p>A caption</p></figcaption></figure>
      <details class="sd-dropdown"><summary>Answer</summary><div><p>Closed, not read</p></div></details>
      <details class="sd-dropdown" open><summary>Table</summary><div><p>Open and read</p></div></details>
      <div class="cell"><details class="hide above-input"><summary>Show code cell source</summary>
      <div class="cell_input"><pre>x = 1</pre></div></details>
      <div class="cell_output"><pre>printed output</pre><p>Displayed Markdown</p></div></div>
      </section></article><footer>Footer words</footer></body></html>"""
    # A title (2); One nisa.dma_copy at 368 GB/s, emphasis and formula (8); formula (1);
    # 1 2048 (2); item two (2); A caption (2); Answer (1); Table Open and read (4);
    # Displayed Markdown (2)
    assert rendered_words(page) == 24
