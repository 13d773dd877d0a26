"""Timing primitives of the benchmark suite: interleaved rounds, spread, machine load, matmul rate.

Every comparison times its competitors in rounds (A, B, C, B, C, A, ...) after a warm-up, so a burst
of load from other processes hits all of them alike; times are quoted as the median [min–max] of
the per-call times, comparisons as the median [min–max] of the per-round ratios, with the load
average read before and after.

    >>> stats = interleaved({'a': f, 'b': g}, rounds=20)
    >>> stats['a']['median_ms'], stats['a']['min_ms'], stats['a']['max_ms']
    >>> ratio_summary(stats, 'a', 'b')['median']
"""
import os
import platform
import time

import numpy as np


def load_average():
    """The 1-minute load average of the machine (float; ``nan`` where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return float('nan')


def summarise(times_s):
    """Median, quartiles and relative spread of a list of durations in seconds.

    Returns a dict of floats in milliseconds: ``median_ms``, ``min_ms``, ``max_ms``, ``q1_ms``,
    ``q3_ms``, ``iqr_ms`` and ``iqr_pct`` (IQR / median x 100), plus ``calls`` (int).
    """
    ms = np.asarray(times_s, dtype=np.float64) * 1e3
    q1, median, q3 = np.percentile(ms, [25, 50, 75])
    return {'median_ms': round(float(median), 4), 'min_ms': round(float(ms.min()), 4),
            'max_ms': round(float(ms.max()), 4),
            'q1_ms': round(float(q1), 4),
            'q3_ms': round(float(q3), 4), 'iqr_ms': round(float(q3 - q1), 4),
            'iqr_pct': round(float((q3 - q1) / median * 100), 1), 'calls': int(ms.size)}


def interleaved(functions, rounds, warmup=2):
    """Time zero-argument callables in interleaved rounds.

    Args:
        functions: dict name -> callable taking no argument (it must block until its result is
            ready, e.g. by calling ``.numpy()``).
        rounds: int >= 3, timed calls per function.
        warmup: int, untimed calls per function first (tracing, caches, thread pools).

    Returns:
        dict name -> ``summarise(...)`` of that function's calls, with ``load_before`` and
        ``load_after`` (1-minute load averages) and ``times_ms`` (the calls, round by round)
        added to each entry.
    """
    if rounds < 3:
        raise ValueError(f'rounds must be >= 3 for quartiles, got {rounds}')
    for fn in functions.values():
        for _ in range(warmup):
            fn()
    load_before = load_average()
    names = list(functions)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:   # rotate who goes first
            start = time.perf_counter()
            functions[name]()
            times[name].append(time.perf_counter() - start)
    load_after = load_average()
    return {name: dict(summarise(t), load_before=load_before, load_after=load_after,
                       times_ms=[round(x * 1e3, 3) for x in t])
            for name, t in times.items()}


def ratio_summary(timings, numerator, denominator):
    """Per-round ratios ``numerator's time / denominator's time`` of ``interleaved`` results
    (less sensitive to slow drifts of the machine's load than the ratio of the medians):
    dict of floats ``median``, ``min``, ``max``, ``q1``, ``q3``.

        >>> ratio_summary({'a': {'times_ms': [2, 9, 4]}, 'b': {'times_ms': [1, 3, 2]}}, 'a', 'b')
        {'median': 2.0, 'min': 2.0, 'max': 3.0, 'q1': 2.0, 'q3': 2.5}
    """
    ratios = (np.asarray(timings[numerator]['times_ms'], dtype=np.float64)
              / np.asarray(timings[denominator]['times_ms'], dtype=np.float64))
    q1, median, q3 = np.percentile(ratios, [25, 50, 75])
    return {name: round(float(value), 3) for name, value in
            (('median', median), ('min', ratios.min()), ('max', ratios.max()), ('q1', q1),
             ('q3', q3))}


def probe_fields(timings, before, after):
    """The JSON fields of an off / on probe's ``interleaved`` results: each side's
    ``'<name> ms'``: [median, min, max], and ``'<before>_over_<after>'``: :func:`ratio_summary`.

        >>> line = dict(change='x', **probe_fields(timings, 'off', 'on'))
    """
    fields = {f'{name} ms': [stats['median_ms'], stats['min_ms'], stats['max_ms']]
              for name, stats in timings.items()}
    fields[f'{before}_over_{after}'] = ratio_summary(timings, before, after)
    return fields


def write_lines(path, lines):
    """Write ``lines`` (str), one per line, to ``path`` atomically (nothing there is half
    written if the run is killed).

        >>> write_lines('benchmarks/results/probe.json', [json.dumps(row) for row in rows])
    """
    from crf_lr.utils.atomic import atomic_write
    with atomic_write(path) as f:
        f.write('\n'.join(lines) + '\n')


def paired_ratios(timings, reference):
    """:func:`ratio_summary` of every other entry of ``interleaved`` results to ``reference``.

        >>> paired_ratios(stats, 'b')['a']['max']
    """
    return {name: ratio_summary(timings, name, reference) for name in timings if name != reference}


def gflops(size, ms):
    """GFLOP/s of a ``size`` x ``size`` by ``size`` x ``size`` matmul (2 size^3 flops) done in
    ``ms`` milliseconds, to 4 significant digits (a tiny matmul under load is not 0.0).

        >>> gflops(1000, 2.0), gflops(64, 10.0)
        (1000.0, 0.05243)
    """
    return float(f'{2 * size ** 3 / (ms * 1e-3) / 1e9:.4g}')


def matmul_call(tf, size=2048, dtype='float32'):
    """A zero-argument callable doing one ``size x size`` by ``size x size`` product of ``dtype``
    in a ``tf.function`` (2 size^3 flops) and waiting for it: what the matmul rate times. Only
    one element of the product comes back: before 2026-11-26 a cast and a sum of the whole
    product followed it, and their time, largest beside a fast bf16 product (AMX), made the rate
    lower and every ``/ limit`` kinder than the product alone gives.

        >>> timings = interleaved({'step': step, 'matmul': matmul_call(tf)}, rounds=5)
    """
    a = tf.cast(tf.random.normal([size, size], seed=1), dtype)
    b = tf.cast(tf.random.normal([size, size], seed=2), dtype)
    product = tf.function(lambda x, y: tf.matmul(x, y)[0, 0])
    return lambda: product(a, b).numpy()


def matmul_gflops(tf, size=2048, rounds=10, dtype='float32'):
    """The machine's matmul rate in TensorFlow: :func:`matmul_call`, timed ``rounds`` times.

    Returns dict: ``gflops`` (the best rate seen: the machine's capability, least disturbed by
    other load), ``gflops_median``, ``size``, and the timing summary.
    """
    stats = interleaved({'matmul': matmul_call(tf, size, dtype)}, rounds=rounds)['matmul']
    return dict(stats, size=size, dtype=dtype, gflops=gflops(size, stats['min_ms']),
                gflops_median=gflops(size, stats['median_ms']))


def machine():
    """Facts about this machine for the results file: cores (and those this process may run
    on), CPU model / family / MHz and native bf16 units (from /proc/cpuinfo), whether it runs
    under a hypervisor, its CPU quota (cores' worth a period, None without one), OS and Python."""
    from crf_lr.model.precision import cpu_flags, native_bf16   # what --precision auto reads
    from crf_lr.speed.threads import affinity_cores, cpu_quota
    from crf_lr.training.run_folder import cpu_model, cpuinfo_fields
    info, flags = cpuinfo_fields(), cpu_flags()
    return {'nproc': os.cpu_count(), 'cpus_allowed': affinity_cores(),
            'cpu_model': cpu_model(),
            'cpu_family': info.get('cpu family'), 'cpu_mhz': info.get('cpu MHz'),
            'avx512': 'avx512f' in flags,
            'bf16_units': list(native_bf16()),
            'hypervisor': 'hypervisor' in flags, 'cpu_quota': cpu_quota(),
            'platform': platform.platform(), 'python': platform.python_version()}


def cpu_name(facts):
    """The CPU of a results file's :func:`machine` facts as its reports name it: model and family
    (AMD's EPYC family 25 is Zen 3 / Zen 4, family 26 Zen 5, with matrix-product rates twice
    apart on the same two cores).

        >>> cpu_name({'cpu_model': 'AMD EPYC', 'cpu_family': '26'})
        'AMD EPYC (family 26)'
    """
    family = facts.get('cpu_family')
    return f"{facts['cpu_model']}{f' (family {family})' if family else ''}"
