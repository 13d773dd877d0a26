"""The package's shape (docs/architecture.md), read from the source without importing it: no
import cycle at import time, no module over 800 lines, serving reads a model folder without
training code, and the wings that need no TensorFlow import none of it at import time.

Oracle: the import statements themselves (``ast``), module level only: an import inside a
function runs when it is called, not when the module loads.
"""
import ast
import graphlib
import re

import pytest

from helpers.paths import REPO

PACKAGE = REPO / 'crf_lr'
MAX_LINES = 800


def _module_name(path):
    parts = path.relative_to(REPO).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob('*.py'))}


def _imported_at_load(name, path):
    """The names module ``name`` imports at module level, made absolute."""
    package = name.split('.') if path.name == '__init__.py' else name.split('.')[:-1]
    return _imports(path.read_text(encoding='utf-8'), package)


def _imports(source, package):
    """The names ``source`` imports outside functions' bodies; relative ones from ``package``
    (a list of the dotted name's parts)."""
    found = set()

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ''
                if child.level:
                    base = '.'.join(package[:len(package) - child.level + 1] + [base]).strip('.')
                found.update(f'{base}.{alias.name}' for alias in child.names)
                found.add(base)
            visit(child)
    visit(ast.parse(source))
    return found


def _crf_lr_edges():
    """{module: the crf_lr modules its loading runs}: each import's module and, for
    ``from package import module``, that module."""
    edges = {}
    for name, path in MODULES.items():
        targets = {t for t in _imported_at_load(name, path) if t in MODULES and t != name}
        edges[name] = {t for t in targets if not name.startswith(t + '.')}   # own parents
    return edges


EDGES = _crf_lr_edges()


def _reach(start):
    seen, todo = set(), [start]
    while todo:
        for target in EDGES[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def _externals_reached(start):
    modules = {start} | _reach(start)
    return {t.split('.')[0] for m in modules for t in _imported_at_load(m, MODULES[m])}


def test_no_import_cycle_at_import_time():
    try:
        order = list(graphlib.TopologicalSorter(EDGES).static_order())
    except graphlib.CycleError as cycle:
        pytest.fail(f'import cycle at import time: {" -> ".join(cycle.args[1])}', pytrace=False)
    assert set(order) == set(MODULES)


def test_no_module_over_800_lines():
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding='utf-8').splitlines())) > MAX_LINES}
    assert not long, f'modules over {MAX_LINES} lines: {long}'


def test_a_model_folder_is_read_without_training_code():
    for reader in ('crf_lr.serving.model_folder', 'crf_lr.serving.tagger'):
        training = {m for m in _reach(reader) if m.startswith('crf_lr.training')}
        assert not training, f'{reader} loads {sorted(training)}'


@pytest.mark.parametrize('wing', ['crf_lr.data', 'crf_lr.evaluation', 'crf_lr.decoding.spans',
                                  'crf_lr.decoding.posteriors', 'crf_lr.model.checks'])
def test_wings_without_tensorflow_import_none_of_it(wing):
    modules = [m for m in MODULES if m == wing or m.startswith(wing + '.')]
    for module in modules:
        reached = _externals_reached(module)
        assert not reached & {'tensorflow', 'tf_keras', 'keras', 'bert4keras'}, module


def test_the_reader_sees_the_imports_it_should():
    """The oracle itself: known edges are found, and a function-level import is not."""
    assert 'crf_lr.compat' in EDGES['crf_lr.model.crf']
    assert 'crf_lr.decoding.viterbi' in EDGES['crf_lr.decoding.posteriors']
    source = ('from ..compat import tf\nif True:\n    import numpy\n'
              'def f():\n    import crf_lr.training.loop\n')
    assert _imports(source, ['crf_lr', 'model']) == {'crf_lr.compat', 'crf_lr.compat.tf', 'numpy'}


def test_the_wing_table_names_every_module():
    """docs/architecture.md's table of wings lists each wing's modules (a wing that points
    elsewhere for them, as keras3 does, lists none): the two that joined speed/ were missing."""
    table = {}
    for line in (REPO / 'docs' / 'architecture.md').read_text(encoding='utf-8').splitlines():
        cells = [cell.strip() for cell in line.strip('|').split('|')]
        if len(cells) == 3 and re.fullmatch(r'`crf_lr/\w+/`', cells[0]):
            table[cells[0].strip('`').rstrip('/')] = set(re.findall(r'`(\w+)`', cells[2]))
    assert len(table) >= 9, table
    for wing, listed in table.items():
        modules = {path.stem for path in (REPO / wing).glob('*.py')} - {'__init__'}
        assert not listed or listed == modules, (
            f'docs/architecture.md, {wing}/: missing {sorted(modules - listed)}, '
            f'gone {sorted(listed - modules)}')
