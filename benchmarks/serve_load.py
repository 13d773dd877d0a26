"""Loopback load test of ``python -m crf_lr.serve``: throughput and latency with micro-batching and
with one request per batch.

Two servers of the same model run side by side on free ports of 127.0.0.1: the default one
(micro-batching) and one started with ``--max-batch 1`` (one request, one batch). A fixed number
of single-sentence requests is sent by 1, 8 and 32 concurrent keep-alive clients, to each server
in turn (interleaved rounds, so a burst of load from other processes hits both alike); it stops
by itself. Prints a Markdown table: requests per second and p50 / p99 latency, the median [min–max]
over rounds, and the throughput ratio of the two servers per round.

    $ python benchmarks/serve_load.py runs/ner/model --requests 2000 --rounds 3
"""
import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    'serve_page', os.path.join(os.path.dirname(HERE), 'tools', 'serve_page.py'))
serve_page = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve_page)

SENTENCES = ['中共中央总书记、国家主席江泽民发表新年讲话。', '张三去北京大学看望李四老师。',
             '香港特别行政区政府今天在九龙举行记者会。', '上海浦东新区的企业正在扩大出口。',
             '今天天气很好，我们去公园散步。', '联合国秘书长安南在纽约发表讲话。',
             '国务院总理朱镕基会见了日本客人。', '新华社北京一月一日电']
MODES = {'micro-batching': (), 'one request, one batch': ('--max-batch', '1')}


async def load(url, clients, requests):
    """Send ``requests`` POSTs from ``clients`` concurrent clients; returns ``(seconds,
    latencies)``, raising on any answer other than 200."""
    import httpx
    latencies, sent = [], iter(range(requests))

    async def client(http):
        for k in sent:
            body = {'texts': [SENTENCES[k % len(SENTENCES)]]}
            began = time.perf_counter()
            response = await http.post(url + '/v1/predict', json=body)
            latencies.append(time.perf_counter() - began)
            if response.status_code != 200:
                raise RuntimeError(f'{url}: {response.status_code} {response.text}')

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=120) as http:
        began = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        return time.perf_counter() - began, latencies


def spread(values, digits=0):
    values = np.asarray(values)
    return (f'{np.median(values):.{digits}f} [{values.min():.{digits}f}–'
            f'{values.max():.{digits}f}]')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('model_dir')
    parser.add_argument('--requests', type=int, default=2000, help='per measurement '
                                                                   '(default: %(default)s)')
    parser.add_argument('--clients', type=int, nargs='+', default=[1, 8, 32])
    parser.add_argument('--rounds', type=int, default=3, help='(default: %(default)s)')
    parser.add_argument('--json', help='also write the measurements here')
    args = parser.parse_args(argv)
    rows = {(c, mode): [] for c in args.clients for mode in MODES}
    load_before = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        urls = {mode: stack.enter_context(serve_page.running_server(args.model_dir, *flags))
                for mode, flags in MODES.items()}
        for url in urls.values():                                  # warm: connections, caches
            asyncio.run(load(url, 8, 64))
        for round_ in range(args.rounds):
            for clients in args.clients:
                for mode in (MODES if round_ % 2 == 0 else reversed(MODES)):
                    seconds, latencies = asyncio.run(load(urls[mode], clients, args.requests))
                    rows[clients, mode].append(dict(
                        per_second=args.requests / seconds,
                        p50_ms=1e3 * np.percentile(latencies, 50),
                        p99_ms=1e3 * np.percentile(latencies, 99)))
                    print(f'round {round_ + 1}, {clients} clients, {mode}: '
                          f'{rows[clients, mode][-1]}', flush=True)
    load_after = os.getloadavg()[0]
    print(f'\n{args.requests} single-sentence requests per measurement, {args.rounds} rounds; '
          f'{os.cpu_count()} cores ({platform.processor() or platform.machine()}); load average '
          f'{load_before:.1f} before, {load_after:.1f} after\n')
    print('| clients | server | requests/s | p50 ms | p99 ms | throughput ratio |')
    print('|--------:|--------|-----------:|-------:|-------:|-----------------:|')
    batched, single = MODES
    for clients in args.clients:
        ratios = [a['per_second'] / b['per_second']
                  for a, b in zip(rows[clients, batched], rows[clients, single])]
        for mode in MODES:
            runs = rows[clients, mode]
            ratio = spread(ratios, 2) + '×' if mode == batched else ''
            print(f'| {clients} | {mode} | {spread([r["per_second"] for r in runs])} | '
                  f'{spread([r["p50_ms"] for r in runs])} | {spread([r["p99_ms"] for r in runs])}'
                  f' | {ratio} |')
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as f:
            json.dump(dict(requests=args.requests, rounds=args.rounds, load_before=load_before,
                           load_after=load_after,
                           rows=[dict(clients=c, server=m, runs=r) for (c, m), r in rows.items()]),
                      f, indent=1)


if __name__ == '__main__':
    main()
