"""``bench/RESULTS.md`` is a results page, and the README's benchmark figures are on it.

Issue 27, item 5: the page reads in five minutes (at most 600 lines, history left to git, one
section per area whose every measurement names its date and command, a table of contents with
one line per area), and the README's figures are checked against it. Text only: no engine, no
import of the packages, so this runs in well under a second.

A README figure is a number with a benchmark unit: a ratio written ``1.81-1.83x`` or ``29.5x``
(no space before the ``x``, so ``64 x 4096`` is a shape, not a figure), or a number followed by
``tok/s``, ``GB/s``, ``TB/s``, ``ms``, ``µs``, ``s`` or ``%``. Each must appear on the page
exactly as the README writes it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "bench" / "RESULTS.md"
README = ROOT / "README.md"

#: The issue's limit on the page's length, in lines.
MAX_LINES = 600
#: The one section that is not an area: how to read the page, with the table of contents.
GUIDE = "Reading this page"

_NUMBER = r"\d+(?:[.,]\d+)*(?:-\d+(?:[.,]\d+)*)?"
FIGURE = re.compile(rf"(?<![\w.])(?:{_NUMBER}x|{_NUMBER}\s?(?:tok/s|GB/s|TB/s|ms|µs|s|%))(?![\w/])")
DATE = re.compile(r"^Date: \d{4}-\d{2}-\d{2}\b", re.M)
COMMAND = re.compile(r"^(?:Command: `[^`]+`|Commands:\n\n    \S)", re.M)
TOC_ROW = re.compile(r"^\| \[([^\]]+)\]\(#([^)]+)\) \| (.+) \|$", re.M)
CITATION = re.compile(r"RESULTS\.md[`,\s]*\"(## [^\"]+)\"")
CITING_SUFFIXES = {".py", ".md", ".cpp", ".cu", ".cuh", ".h", ".toml", ".cfg"}
CITING_DIRS = ("promptcache", "linters", "local_engine", "bench", "tests", "docs")


def figures(text: str) -> list[str]:
    """The benchmark figures quoted in ``text``, in order, as written (``"1.81-1.83x"``)."""
    return FIGURE.findall(text)


def on_page(figure: str, page: str) -> bool:
    """Whether ``figure`` appears in ``page`` as written, not as part of a longer number."""
    after = r"(?!\d|\.\d)" if figure[-1].isdigit() else r"(?!\w)"
    return re.search(rf"(?<![\d.]){re.escape(figure)}{after}", page) is not None


def sections(page: str, level: str = "## ") -> dict[str, str]:
    """Heading text -> body, for the headings of one level (``"## "`` or ``"### "``)."""
    parts = re.split(rf"^{re.escape(level)}(.+)$", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.lower())
    return kept.replace(" ", "-")


def area_name(heading: str) -> str:
    """The area's short name, the part of ``"kvquant: quantized ..."`` before the colon."""
    return heading.split(":", 1)[0]


def measurements(body: str) -> dict[str, str]:
    """A section's measurements: its ``###`` parts, or the section itself when it has none."""
    parts = sections(body, "### ")
    return parts or {"(the section)": body}


def page_text() -> str:
    return PAGE.read_text(encoding="utf-8")


def areas() -> dict[str, str]:
    return {h: b for h, b in sections(page_text()).items() if h != GUIDE}


def test_figures_reads_ratios_and_units_but_not_shapes():
    sentence = (
        "reads at 1.81-1.83x the speed, 107.1 tok/s, about 26 s and 80-118 s to build, "
        "a 64 x 4096 batch, 3.5 % of cold, 91% of the floor, 198.8 µs, 40.2 GB/s, "
        "4.46 TB/s, 8.21 ms, capability 8.0+, gpt-5.4, 1,024-token minimum, 29.5x"
    )
    assert figures(sentence) == [
        "1.81-1.83x",
        "107.1 tok/s",
        "26 s",
        "80-118 s",
        "3.5 %",
        "91%",
        "198.8 µs",
        "40.2 GB/s",
        "4.46 TB/s",
        "8.21 ms",
        "29.5x",
    ]


def test_on_page_needs_the_figure_as_written():
    page = "INT8 decode 1.81-1.83x bf16; 0.1363 ms; build ~26 s; 11.2x"
    assert on_page("1.81-1.83x", page)
    assert on_page("26 s", page)
    assert not on_page("1.71-1.76x", page)  # the README's old ragged-batch range
    assert not on_page("1.2x", page)  # inside 11.2x
    assert not on_page("363 ms", page)  # inside 0.1363 ms
    assert on_page("11.2", page) and not on_page("0.13", page)  # a number: 0.1363 is longer


def test_the_page_is_short_and_leaves_history_to_git():
    page = page_text()
    assert len(page.splitlines()) <= MAX_LINES
    head = page.split("\n## ", 1)[0]
    assert "`git log -p bench/RESULTS.md`" in head


def test_every_measurement_names_its_date_and_command():
    assert len(areas()) >= 10
    for heading, body in areas().items():
        for part, text in measurements(body).items():
            where = f"{heading} / {part}"
            assert DATE.search(text), f"no 'Date: YYYY-MM-DD' line in {where}"
            assert COMMAND.search(text), f"no 'Command: `...`' or 'Commands:' block in {where}"
            assert "Machine:" in text, f"no 'Machine:' in {where}"


def test_the_contents_have_one_line_per_area_linking_its_section():
    guide = sections(page_text())[GUIDE]
    rows = TOC_ROW.findall(guide)
    by_name = {name: (anchor, headline) for name, anchor, headline in rows}
    assert len(by_name) == len(rows), "an area listed twice in the contents"
    expected = {area_name(h): slug(h) for h in areas()}
    assert {name: anchor for name, (anchor, _) in by_name.items()} == expected
    bodies = {area_name(h): body for h, body in areas().items()}
    for name, (_, headline) in by_name.items():
        assert figures(headline), f"the contents line of {name} quotes no figure"
        for figure in figures(headline):
            number = re.match(_NUMBER, figure).group()
            assert on_page(number, bodies[name]), f"{name}: {figure} is not in its section"


def test_every_readme_figure_is_on_the_page():
    quoted = figures(README.read_text(encoding="utf-8"))
    assert quoted, "the README quotes no benchmark figure: the extractor or the README changed"
    page = page_text()
    missing = [f for f in quoted if not on_page(f, page)]
    assert not missing, f"README figures not on bench/RESULTS.md: {missing}"


def _citing_files():
    yield README
    for folder in CITING_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in CITING_SUFFIXES and path != PAGE and ".venv" not in path.parts:
                yield path


def test_every_citation_of_a_section_names_one_that_exists():
    names = {area_name(h) for h in sections(page_text())}
    cited = {}
    for path in _citing_files():
        for name in CITATION.findall(path.read_text(encoding="utf-8", errors="replace")):
            cited.setdefault(name.removeprefix("## "), []).append(path.relative_to(ROOT))
    assert cited, "no citation found: the pattern or the code changed"
    unknown = {name: paths for name, paths in cited.items() if name not in names}
    assert not unknown, f"citations of sections bench/RESULTS.md does not have: {unknown}"
