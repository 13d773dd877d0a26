"""Whole training steps per precision: float32, float32 with the whole step XLA-compiled, and
Keras ``mixed_bfloat16`` (``crf_lr.model.precision.set_precision``), and ``mixed_bfloat16`` with the
whole step XLA-compiled, for every head, against the
arithmetic limit of the same run's float32 and bfloat16 matmul rates (2048^3).

Each (head, variant) gets its own model (same architecture, same seed), and all of them are
timed in interleaved rounds per (layers, batch, n). ``limit`` = encoder FLOPs / matmul rate of
the variant's precision: no step can beat it; ``step / limit`` says how far a step is from it.
The 2048^3 products of both precisions run in the same rounds as the steps, so each round also
gives a step / limit of its own (``step / limit, same rounds``: the VM's speed drifts between
the rate measured before the rounds and the rounds themselves).

    >>> rows = precision_step_cases(tf, keras, [(4, 16, 128, 10)], ['softmax', 'CRF (crf_lr)'])
"""
import numpy as np

import models
from timing import interleaved, matmul_call, ratio_summary

VARIANTS = ('float32', 'XLA', 'bf16', 'bf16 XLA')
MATMUL_SIZE = 2048


def _dtype(variant):
    """The matmul dtype of a variant (``'bf16 XLA'`` -> ``'bfloat16'``)."""
    return 'bfloat16' if variant.startswith('bf16') else 'float32'


def _over_limit_per_round(timings, step, matmul, gflop):
    """Median [min-max] over the rounds of ``step``'s time / the limit at that round's matmul
    rate (``gflop`` encoder GFLOP at the rate of the ``matmul`` entry, a 2048^3 product).

        >>> _over_limit_per_round(timings, 'softmax | float32', 'matmul | float32', 123.7)
        {'median': 1.46, 'min': 1.41, 'max': 1.52, 'q1': ..., 'q3': ...}
    """
    flop_ratio = 2 * MATMUL_SIZE ** 3 / 1e9 / gflop          # step time / matmul time -> / limit
    return {k: round(v * flop_ratio, 3) for k, v in ratio_summary(timings, step, matmul).items()}


def _build(tf, keras, head, layers, variant):
    head_model = models.build_head_in(
        tf, keras, head, layers, 'mixed_bfloat16' if _dtype(variant) == 'bfloat16' else 'float32')
    return head_model, models.train_step(tf, head_model, jit_compile=variant.endswith('XLA'))


def precision_step_cases(tf, keras, plan, heads, variants=VARIANTS, rates=None,
                         progress=print):
    """One result per (layers, batch, n, rounds) of ``plan``: median step ms [min-max] of every
    (head, variant), and per head ``bf16 speed-up`` (float32 / bf16 medians), ``XLA speed-up``,
    and ``step / limit`` per variant given ``rates`` {'float32': GFLOP/s, 'bfloat16': GFLOP/s}.
    """
    results = []
    for layers in sorted({p[0] for p in plan}, reverse=True):
        built = {(head, variant): _build(tf, keras, head, layers, variant)
                 for head in heads for variant in variants}
        for _, batch, n, rounds in [p for p in plan if p[0] == layers]:
            data = models.random_batch(np.random.default_rng(n), batch, n)
            calls = {}
            for (head, variant), (head_model, step) in built.items():
                arguments = models.step_arguments(tf, head_model, data)
                calls[f'{head} | {variant}'] = lambda s=step, a=arguments: s(*a).numpy()
            if rates:
                calls.update({f'matmul | {dtype}': matmul_call(tf, MATMUL_SIZE, dtype)
                              for dtype in {_dtype(v) for v in variants}})
            timings = interleaved(calls, rounds=rounds, warmup=2)
            gflop = models.encoder_flops(layers, batch, n) / 1e9
            row = {'name': 'precision_step', 'shape': {'layers': layers, 'batch': batch, 'n': n},
                   'encoder_gflop': round(gflop, 3), 'timings': timings, 'heads': {}}
            for head in heads:
                median = {v: timings[f'{head} | {v}']['median_ms'] for v in variants}
                summary = {f'{v} / bf16': round(median[v] / median['bf16'], 3)
                           for v in variants if v != 'bf16' and 'bf16' in variants}
                if rates:
                    for v in variants:
                        dtype = _dtype(v)
                        rate = rates[dtype]
                        summary[f'{v} step / limit'] = round(median[v] / (gflop / rate * 1e3), 2)
                        summary[f'{v} step / limit, same rounds'] = _over_limit_per_round(
                            timings, f'{head} | {v}', f'matmul | {dtype}', gflop)
                row['heads'][head] = summary
            results.append(row)
            progress(f'precision steps, {layers} layers, batch {batch}, n={n}: {row["heads"]}')
    return results
