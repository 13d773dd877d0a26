"""Every pointer into the documentation lands somewhere: a section of a ``docs/*.md`` file named
in the code or in the documents exists under that name, and a relative link of README.md or of a
document names an existing file (and, with an anchor, an existing heading of it).

A section is named as ``docs/performance.md, "The training step"`` (or ``*The training step*``,
or ``"The training step", in docs/performance.md``), or linked as
``docs/performance.md#the-training-step``; a quoted or starred name must be a heading of the file
as written (case aside), an anchor the one GitHub makes of a heading: lowercased, punctuation but
``-`` and ``_`` dropped, each space a ``-``, a repeated heading's anchor suffixed ``-1``, ``-2``.

Oracle: the headings read from the files themselves. No TensorFlow.
"""
import re
from collections import Counter
from functools import lru_cache

import pytest
from helpers.paths import REPO

DOCS = REPO / 'docs'
SOURCES = sorted([*REPO.glob('crf_lr/**/*.py'), *REPO.glob('examples/*.py'),
                  *REPO.glob('benchmarks/*.py'), REPO / 'README.md', *DOCS.glob('*.md')])
MARKDOWN = [REPO / 'README.md', *sorted(DOCS.glob('*.md'))]

_NAME = r'(?:"(?P<{0}q>[^"\n]{{1,100}})"|\*(?P<{0}s>[^*\n]{{1,100}})\*)'
REFERENCE = re.compile(
    r'docs/(?P<file>[\w.-]+\.md)(?:#(?P<anchor>[\w-]+)|[,:;]?[ ]*\(?[ ]*' + _NAME.format('after')
    + r')|' + _NAME.format('before') + r',?[ ]+in[ ]+docs/(?P<file2>[\w.-]+\.md)')
LINK = re.compile(r'\]\((?P<target>[^)\s]+)\)')
HEADING = re.compile(r'^#{1,6}[ \t]+(?P<text>.+?)[ \t]*#*[ \t]*$')
HTML_ANCHOR = re.compile(r'<a\s+(?:name|id)="(?P<anchor>[^"]+)"')


def flowing_text(path):
    """The file as one line per paragraph: a wrapped docstring's or comment's next line (its
    indent and ``#`` dropped) or a Markdown line's continuation joined with one space, and two
    string literals on consecutive lines joined as Python joins them, so that a section name
    broken over two lines reads whole."""
    text = path.read_text(encoding='utf-8')
    if path.suffix != '.py':
        return re.sub(r'\n[ \t]*(?=\S)', ' ', text)
    text = re.sub(r"'[ \t]*\n[ \t]*'", '', text)     # 'implicitly ' \n 'joined' string literals
    return re.sub(r'\n[ \t]*(?:#[ \t]*)?', ' ', text)


def plain(heading):
    """A heading's text as read: Markdown's emphasis and code marks dropped."""
    return re.sub(r'[`*]', '', heading).strip()


def github_anchor(heading):
    return re.sub(r'[^\w\- ]', '', plain(heading).lower()).replace(' ', '-')


@lru_cache(maxsize=None)
def headings(path):
    """(the headings as written, the anchors GitHub makes of them) of a Markdown file, fenced
    code blocks left out."""
    names, anchors, seen, fenced = set(), set(), Counter(), False
    for line in path.read_text(encoding='utf-8').splitlines():
        if line.lstrip().startswith(('```', '~~~')):
            fenced = not fenced
            continue
        if fenced:
            continue
        anchors.update(m['anchor'] for m in HTML_ANCHOR.finditer(line))
        match = HEADING.match(line)
        if match:
            names.add(plain(match['text']).lower())
            anchor = github_anchor(match['text'])
            anchors.add(anchor if not seen[anchor] else f'{anchor}-{seen[anchor]}')
            seen[anchor] += 1
    return frozenset(names), frozenset(anchors)


def references():
    """(source file, docs file, kind, name) for every section named in SOURCES."""
    found = []
    for path in SOURCES:
        source = str(path.relative_to(REPO))
        for match in REFERENCE.finditer(flowing_text(path)):
            if match['file2']:
                found.append((source, match['file2'], 'name',
                              match['beforeq'] or match['befores']))
            elif match['anchor']:
                found.append((source, match['file'], 'anchor', match['anchor']))
            else:
                found.append((source, match['file'], 'name', match['afterq'] or match['afters']))
    return found


def links():
    """(where, target file, anchor or None) for every relative link of README.md and docs/."""
    found = []
    for path in MARKDOWN:
        for match in LINK.finditer(flowing_text(path)):
            target = match['target']
            if re.match(r'[a-z][a-z0-9+.-]*:', target):     # http:, https:, mailto: ...
                continue
            file, _, anchor = target.partition('#')
            found.append((f'{path.relative_to(REPO)} ({target})',
                          (path.parent / file).resolve() if file else path, anchor or None))
    return found


def test_the_scan_finds_the_references_it_checks():
    """The patterns still match the ways the code and documents name a section (a scan that
    finds nothing would pass anything)."""
    kinds = Counter(kind for _, _, kind, _ in references())
    assert kinds['name'] >= 3 and kinds['anchor'] >= 5, kinds
    assert len(links()) >= 20


@pytest.mark.parametrize('source, file, kind, name', [
    pytest.param(*ref, id=f'{ref[0]}->{ref[1]}:{ref[3]}') for ref in references()])
def test_a_named_section_exists(source, file, kind, name):
    path = DOCS / file
    assert path.is_file(), f'{source}: docs/{file} does not exist'
    names, anchors = headings(path)
    if kind == 'anchor':
        assert name in anchors, (f'{source}: docs/{file} has no heading whose anchor is #{name}; '
                                 f'its anchors: {sorted(anchors)}')
    else:
        assert plain(name).lower() in names, (
            f'{source}: docs/{file} has no section "{name}"; its headings: {sorted(names)}')


@pytest.mark.parametrize('where, target, anchor', [pytest.param(*link, id=link[0])
                                                  for link in links()])
def test_a_relative_link_lands(where, target, anchor):
    assert target.exists(), f'{where}: {target} does not exist'
    if anchor:
        assert target.suffix == '.md', f'{where}: an anchor into a file that is not Markdown'
        assert anchor in headings(target)[1], f'{where}: {target.name} has no heading #{anchor}'
