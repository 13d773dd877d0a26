"""``python -m crf_lr.patches``: the registry's table, each row's state in this process after
importing every module that applies one; ``--markdown``: the README's box (no states).

    $ python -m crf_lr.patches
    $ CRF_LR_SPEED_PATCHES=0 python -m crf_lr.patches      # speed rows 'off: ...'
"""
import argparse
import importlib

from crf_lr.patches import (KINDS, ROWS, VERIFIED, installed_versions, speed_off_reason, state,
                            versions_text)

_VERIFIED_HEADER = f'verified ({" / ".join(VERIFIED)})'


def _verified(row):
    return ' / '.join('/'.join(versions) for versions in row.verified.values())


def markdown():
    """The README's box: a table with a line a row, what the kinds mean in its header."""
    kinds = '; '.join(f'`{kind}`: {meaning}' for kind, meaning in KINDS.items())
    lines = [f'| patch (states: `python -m crf_lr.patches`) | kind ({kinds}) | target | switch | '
             f'{_VERIFIED_HEADER} |', '|---|---|---|---|---|']
    return '\n'.join(lines + [f'| {row.name} | {row.kind} | '
                              f'{", ".join(f"`{target}`" for target in row.targets)} | '
                              f'{row.switch} | {_verified(row)} |' for row in ROWS.values()])


def table():
    """Each row's name, kind, state, switch, verified versions and targets, in columns."""
    for site in dict.fromkeys(row.site for row in ROWS.values()):
        importlib.import_module(site)
    rows = [('patch', 'kind', 'state', 'switch', _VERIFIED_HEADER, 'target')]
    rows += [(row.name, row.kind, state(row.name), row.switch, _verified(row),
              ', '.join(row.targets)) for row in ROWS.values()]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = ['  '.join(cell.ljust(width) for cell, width in zip(row, widths)) + '  ' + row[-1]
             for row in rows]
    speed_off = speed_off_reason()
    return '\n'.join([f'installed: {versions_text(installed_versions())}; speed patches '
                      f'{"on" if speed_off is None else f"off: {speed_off}"}', *lines])


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m crf_lr.patches', description=__doc__)
    parser.add_argument('--markdown', action='store_true', help="the README's box, no states")
    args = parser.parse_args(argv)
    from crf_lr.utils.cli import quiet_tensorflow
    quiet_tensorflow(native=argv is None)     # the table's sites load TensorFlow: no C++ lines
    print(markdown() if args.markdown else table())


if __name__ == '__main__':
    main()
