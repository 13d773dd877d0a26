"""A docstring's usage example, for a test that runs it as written.

    from helpers.doc_examples import example_code, example_output
    exec(example_code(Batches.collect), namespace)
"""
import inspect


def _example_lines(obj):
    return [line.strip() for line in inspect.getdoc(obj).splitlines()]


def example_code(obj):
    """The ``>>>`` lines of ``obj``'s docstring, with their ``...`` continuations, as one block."""
    return '\n'.join(line[4:] for line in _example_lines(obj)
                     if line.startswith(('>>> ', '... ')))


def example_output(obj):
    """What the docstring shows after its last ``>>>`` line, its lines joined by spaces."""
    lines = _example_lines(obj)
    last = max(i for i, line in enumerate(lines) if line.startswith(('>>> ', '... ')))
    return ' '.join(line for line in lines[last + 1:] if line)
