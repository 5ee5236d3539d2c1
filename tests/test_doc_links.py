"""Every relative link of the README, docs/ (but the frozen journal) and examples/ reaches its file, and a link
to a heading (``page.md#anchor``) reaches a heading of that page, as GitHub makes anchors of headings."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "examples").rglob("*.md")])
PAGES = [p for p in PAGES if "journal" not in p.parts]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens and underscores dropped, spaces to
    hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set:
    text = FENCE.sub("", page.read_text())
    return {anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def links(page: Path):
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if not re.match(r"[a-z]+:", target):  # (http:, https:, mailto:)
            yield target


def test_the_anchors_are_githubs():
    assert anchor("The measured deployment (Multi30k En-De)") == "the-measured-deployment-multi30k-en-de"
    assert anchor("Rewards, and what they do to length") == "rewards-and-what-they-do-to-length"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_reaches_its_file_and_heading(page):
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif fragment and where.suffix == ".md" and fragment not in anchors(where):
            broken.append(f"{target}: no heading '{fragment}' in {where.relative_to(REPO)}")
    assert not broken, broken
