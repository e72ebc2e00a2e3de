"""The book's pages stay readable, measured on their sources: prose words per page and in all, code
a reader sees outside the listings a page teaches from, no long paragraph said on three pages, and
every notebook chapter opening with what it teaches and closing with takeaways.

Prose: the Markdown of a page outside code fences, directive options and tables. Visible code: the
non-blank source lines of code cells not tagged remove-input, hide-input or remove-cell.
"""
import collections
import json
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
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


CHAPTERS = [p for p in PAGES if source(p).suffix == ".ipynb"]


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
