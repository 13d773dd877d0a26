"""Every Python snippet of README.md and docs/*.md reads as written: each name it imports exists
where it says, and the names a reader has to import (``keras``, ``tf``, ``np``, crf_lr's public
names, a task script) are imported in it or in an earlier snippet of the same page; its other
unbound names (``texts``, ``inputs``, ``model``) are the reader's own.

Oracle: the imports themselves, run in fresh processes from the project folder (one for the
tf-keras side, one for Keras 3: a process holds one side).
"""
import ast
import builtins
import json
import re
import subprocess
import sys
import textwrap

import crf_lr
import pytest
from helpers.paths import REPO

MARKDOWN = [REPO / 'README.md', *sorted((REPO / 'docs').glob('*.md'))]
FENCE = re.compile(r'^([ \t]*)```python\n(.*?)^[ \t]*```', re.M | re.S)
MUST_IMPORT = ({'keras', 'tf', 'K', 'np', 'crf_lr'} | set(crf_lr.__all__)
               | {path.stem for path in (REPO / 'examples').glob('*.py')})


def snippets():
    """(page, line, code) of every fenced Python block, dedented (a block may sit in a list)."""
    found = []
    for path in MARKDOWN:
        text = path.read_text(encoding='utf-8')
        for match in FENCE.finditer(text):
            line = text.count('\n', 0, match.start()) + 1
            found.append((path.relative_to(REPO).as_posix(), line,
                          textwrap.dedent(match.group(2))))
    return found


def imports(tree):
    """(module, name or None) of every import statement."""
    pairs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            pairs += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            pairs += [(node.module, alias.name) for alias in node.names]
    return pairs


def bound(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split('.')[0] for alias in node.names)
    return names


def unimported(page_snippets):
    """(line, name) of each MUST_IMPORT name a snippet uses before its page binds it."""
    missing, seen = [], set(dir(builtins))
    for _, line, code in page_snippets:
        tree = ast.parse(code)
        seen |= bound(tree)
        missing += [(line, node.id) for node in ast.walk(tree)
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                    and node.id in MUST_IMPORT and node.id not in seen]
    return missing


SNIPPETS = snippets()


def test_the_scan_finds_the_snippets():
    assert len(SNIPPETS) >= 10 and any(page == 'docs/scripts.md' for page, _, _ in SNIPPETS)


@pytest.mark.parametrize('page', sorted({page for page, _, _ in SNIPPETS}))
def test_a_snippet_imports_what_it_uses(page):
    missing = unimported([snippet for snippet in SNIPPETS if snippet[0] == page])
    assert not missing, f'{page}: used and never imported: ' + ', '.join(
        f'{name!r} (snippet at line {line})' for line, name in missing)


CHECK_IMPORTS = '''
import importlib, json, sys
for page, line, module, name in json.loads(sys.argv[1]):
    try:
        found = importlib.import_module(module)
        if name not in (None, '*') and not hasattr(found, name):
            importlib.import_module(f'{module}.{name}')     # a submodule, as `from` finds it
    except Exception as error:
        print(f'{page}:{line}: {module} {name or ""}: {type(error).__name__}: {error}')
'''


def keras3_page(page):
    return any(module.startswith('crf_lr.keras3') for p, _, code in SNIPPETS if p == page
               for module, _ in imports(ast.parse(code)))


@pytest.mark.parametrize('side', ['tf-keras', 'keras3'])
def test_every_imported_name_exists(side):
    wanted = [(page, line, module, name) for page, line, code in SNIPPETS
              if keras3_page(page) == (side == 'keras3')
              for module, name in imports(ast.parse(code))]
    out = subprocess.run([sys.executable, '-c', CHECK_IMPORTS, json.dumps(wanted)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert not out.stdout, out.stdout
