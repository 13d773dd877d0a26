"""Per-variable learning-rate multipliers by regular expression, shared by the tf-keras optimizers
(``crf_lr.training.optimizers``) and the Keras 3 ones (``crf_lr.keras3.optimizers``). No TensorFlow.

    >>> match_multiplier('Transformer-1-FeedForward/kernel', {'Transformer-1-': 0.9, '': 2})
    0.9
"""
import re


def check_patterns(patterns, argument):
    """Raise TypeError / ValueError naming ``argument`` unless every pattern is a valid regex str.

        >>> check_patterns({'CRF': 100}, 'lr_multipliers')
    """
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f'{argument}: patterns must be str, got {pattern!r}')
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(f'{argument}: {pattern!r} is not a valid regular expression '
                             f'({error})') from None


def match_multiplier(name, lr_multipliers):
    """The multiplier of the pattern whose ``re.search`` match in ``name`` is longest (1.0: none).

    Args:
        name: str, a variable name or path such as ``'CRF/trans'``.
        lr_multipliers: dict regex -> float.
    Returns:
        float. Equally long matches with different multipliers raise ValueError.
    """
    best_length, best = -1, {}
    for pattern, multiplier in lr_multipliers.items():
        found = re.search(pattern, name)
        if found is None:
            continue
        length = found.end() - found.start()
        if length > best_length:
            best_length, best = length, {pattern: multiplier}
        elif length == best_length:
            best[pattern] = multiplier
    if not best:
        return 1.0
    if len(set(best.values())) > 1:
        raise ValueError(f'learning-rate multiplier of variable {name!r} is ambiguous: patterns '
                         f'{best} match equally long text; make one of them more specific')
    return float(next(iter(best.values())))
