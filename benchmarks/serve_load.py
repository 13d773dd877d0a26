"""Loopback load test of ``python -m crf_lr.serve``: throughput and latency with micro-batching and
with one request per batch.

Two servers of the same model run side by side on free ports of 127.0.0.1: the default one
(micro-batching) and one started with ``--max-batch 1`` (one request, one batch). A fixed number
of single-sentence requests is sent by 1, 8 and 32 concurrent keep-alive clients, to each server
in turn (interleaved rounds, so a burst of load from other processes hits both alike); it stops
by itself. Prints a Markdown table: requests per second and p50 / p99 latency, the median [min–max]
over rounds, the throughput ratio of the two servers per round, and the CPU time the server
process and this client spent per request (what throughput an idle machine would allow, where
other processes take CPU from a shared one).

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
    """Send ``requests`` POSTs from ``clients`` concurrent keep-alive connections; returns
    ``(seconds, latencies)``, raising on any answer other than 200.

    The client speaks HTTP/1.1 over asyncio streams itself: an HTTP library costs several
    milliseconds of CPU a request (httpx: ~4 ms here), which on a shared machine would be taken
    from the server being measured."""
    host, port = url.split('//')[1].split(':')
    latencies, sent = [], iter(range(requests))

    async def client():
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for k in sent:
                body = json.dumps({'texts': [SENTENCES[k % len(SENTENCES)]]}).encode()
                began = time.perf_counter()
                writer.write(b'POST /v1/predict HTTP/1.1\r\nHost: %s\r\nContent-Type: '
                             b'application/json\r\nContent-Length: %d\r\n\r\n%s'
                             % (host.encode(), len(body), body))
                head = await reader.readuntil(b'\r\n\r\n')
                length = int(head.lower().split(b'content-length:')[1].split(b'\r\n')[0])
                answer = await reader.readexactly(length)
                latencies.append(time.perf_counter() - began)
                if not head.startswith(b'HTTP/1.1 200'):
                    raise RuntimeError(f'{url}: {head.splitlines()[0]} {answer[:200]}')
        finally:
            writer.close()

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - began, latencies


def cpu_seconds(pid):
    """User + system CPU seconds of process ``pid`` so far (all its threads; Linux /proc)."""
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


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
        servers = {mode: stack.enter_context(serve_page.running_server(args.model_dir, *flags))
                   for mode, flags in MODES.items()}
        for url, _ in servers.values():                            # warm: connections, caches
            asyncio.run(load(url, 8, 64))
        for round_ in range(args.rounds):
            for clients in args.clients:
                for mode in (MODES if round_ % 2 == 0 else reversed(MODES)):
                    url, pid = servers[mode]
                    server_cpu, client_cpu = cpu_seconds(pid), time.process_time()
                    seconds, latencies = asyncio.run(load(url, clients, args.requests))
                    rows[clients, mode].append(dict(
                        per_second=args.requests / seconds,
                        p50_ms=1e3 * np.percentile(latencies, 50),
                        p99_ms=1e3 * np.percentile(latencies, 99),
                        server_cpu_ms=1e3 * (cpu_seconds(pid) - server_cpu) / args.requests,
                        client_cpu_ms=1e3 * (time.process_time() - client_cpu) / args.requests))
                    print(f'round {round_ + 1}, {clients} clients, {mode}: '
                          f'{rows[clients, mode][-1]}', flush=True)
    load_after = os.getloadavg()[0]
    print(f'\n{args.requests} single-sentence requests per measurement, {args.rounds} rounds; '
          f'{os.cpu_count()} cores ({platform.processor() or platform.machine()}); load average '
          f'{load_before:.1f} before, {load_after:.1f} after\n')
    print('| clients | server | requests/s | p50 ms | p99 ms | throughput ratio '
          '| server CPU ms / request | client CPU ms / request |')
    print('|--------:|--------|-----------:|-------:|-------:|-----------------:'
          '|------------------------:|------------------------:|')
    batched, single = MODES
    for clients in args.clients:
        ratios = [a['per_second'] / b['per_second']
                  for a, b in zip(rows[clients, batched], rows[clients, single])]
        for mode in MODES:
            runs = rows[clients, mode]
            ratio = spread(ratios, 2) + '×' if mode == batched else ''
            print(f'| {clients} | {mode} | {spread([r["per_second"] for r in runs])} | '
                  f'{spread([r["p50_ms"] for r in runs])} | {spread([r["p99_ms"] for r in runs])}'
                  f' | {ratio} | {spread([r["server_cpu_ms"] for r in runs], 1)} | '
                  f'{spread([r["client_cpu_ms"] for r in runs], 1)} |')
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as f:
            json.dump(dict(requests=args.requests, rounds=args.rounds, load_before=load_before,
                           load_after=load_after,
                           rows=[dict(clients=c, server=m, runs=r) for (c, m), r in rows.items()]),
                      f, indent=1)


if __name__ == '__main__':
    main()
