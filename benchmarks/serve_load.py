"""Loopback load test of ``python -m crf_lr.serve``: throughput and latency with micro-batching and
with one window per batch, against ``crf_lr.serving.predict``'s batch throughput on the same
sentences.

Two servers of the same model run side by side on free ports of 127.0.0.1: the default one
(micro-batching) and one started with ``--max-batch 1``. A fixed number of single-sentence
requests is sent by 1, 8, 32 and 64 concurrent keep-alive clients (aiohttp on asyncio, one
process, the JSON bodies encoded beforehand: about 0.2 ms of CPU a request, where httpx took 2
ms on the same cores the servers use), to each server in turn, for two sets of sentences: short
(10-21 characters) and realistic (MSRA test sentences of 40-50 characters, from ``--data-dir``,
when there); it stops by itself. Right before each measurement,
``crf_lr.serving.predict.predict_lines`` runs on the same sentences in batches of 32 in this process
(no load running meanwhile): the batch throughput a server can at best approach; a row's "of batch"
divides each measurement's requests per second by the batch throughput measured just before it.
Rounds are interleaved (each round runs every row, the two servers' order swapped every other
round), so a burst of load from other processes hits all alike. Prints a Markdown table: median
[min-max] over rounds of requests per second, p50 / p99 latency, the share of the batch throughput,
and the CPU time the server process (all its threads) and this client spent per request.

    $ python benchmarks/serve_load.py runs/ner/model --data-dir /work/shared/data
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

SHORT = ['中共中央总书记、国家主席江泽民发表新年讲话。',
         '张三去北京大学看望李四老师。',
         '香港特别行政区政府今天在九龙举行记者会。',
         '上海浦东新区的企业正在扩大出口。',
         '今天天气很好，我们去公园散步。',
         '联合国秘书长安南在纽约发表讲话。',
         '国务院总理朱镕基会见了日本客人。', '新华社北京一月一日电']
MODES = {'micro-batching': (), 'one window a batch': ('--max-batch', '1')}


def realistic(data_dir, count=400):
    """MSRA test sentences of 40-50 characters (None without the data)."""
    if not data_dir or not os.path.isdir(os.path.join(data_dir, 'msra_ner')):
        return None
    from crf_lr.data.benchmarks import load_dataset
    return [e.text for e in load_dataset('msra', 'test', data_dir)
            if 40 <= len(e.text) <= 50][:count]


def batch_throughput(tagger, sentences):
    """Sentences per second of ``predict_lines`` on ``sentences`` in batches of 32."""
    from crf_lr.serving.predict import predict_lines
    began = time.perf_counter()
    for k in range(0, len(sentences), 32):
        predict_lines(tagger, sentences[k:k + 32])
    return len(sentences) / (time.perf_counter() - began)


async def load(url, clients, requests, sentences):
    """Send ``requests`` POSTs of one sentence each from ``clients`` concurrent keep-alive
    connections (aiohttp); returns ``(seconds, latencies)``, raising on any answer but 200."""
    import aiohttp
    bodies = [json.dumps({'texts': [sentence]}).encode() for sentence in sentences]
    headers = {'Content-Type': 'application/json'}
    latencies, sent = [], iter(range(requests))
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as session:
        async def client():
            for k in sent:
                began = time.perf_counter()
                async with session.post('/v1/predict', data=bodies[k % len(bodies)],
                                        headers=headers) as answer:
                    text = await answer.read()
                latencies.append(time.perf_counter() - began)
                if answer.status != 200:
                    raise RuntimeError(f'{url}: {answer.status} {text[:200]}')
        began = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - began, latencies


def cpu_seconds(pid):
    """User + system CPU seconds of process ``pid`` so far (all its threads; Linux /proc)."""
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def cpu_name():
    """The CPU's model name (Linux /proc/cpuinfo), else the machine type."""
    with contextlib.suppress(OSError):
        with open('/proc/cpuinfo', encoding='utf-8') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    return platform.machine()


def spread(values, digits=0):
    values = np.asarray(values)
    return (f'{np.median(values):.{digits}f} [{values.min():.{digits}f}–'
            f'{values.max():.{digits}f}]')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('model_dir')
    parser.add_argument('--data-dir', default=os.environ.get('CRF_LR_DATA'),
                        help='the shared data folder, for the realistic sentences')
    parser.add_argument('--requests', type=int, default=1000, help='per measurement '
                                                                   '(default: %(default)s)')
    parser.add_argument('--clients', type=int, nargs='+', default=[1, 8, 32, 64])
    parser.add_argument('--rounds', type=int, default=2, help='(default: %(default)s)')
    parser.add_argument('--json', help='also write the measurements here')
    args = parser.parse_args(argv)
    sets = {'short': SHORT * 32}
    long_ones = realistic(args.data_dir)
    if long_ones:
        sets['realistic'] = long_ones
    from crf_lr.utils.cli import quiet_tensorflow
    quiet_tensorflow(native=argv is None)     # the command line's, not a test's process
    from crf_lr.serving.predict import predict_lines
    from crf_lr.serving.tagger import Tagger
    tagger = Tagger.load(args.model_dir, batch_size=32)
    for sentences in sets.values():
        predict_lines(tagger, sentences[:32])                      # traced
    rows = {(name, c, mode): [] for name in sets for c in args.clients for mode in MODES}
    batch = {name: [] for name in sets}
    loads = [os.getloadavg()[0]]
    with contextlib.ExitStack() as stack:
        servers = {mode: stack.enter_context(serve_page.running_server(args.model_dir, *flags))
                   for mode, flags in MODES.items()}
        for url, _ in servers.values():                            # warm: connections, caches
            asyncio.run(load(url, 8, 64, SHORT))
        for round_ in range(args.rounds):
            for (name, clients, mode) in rows:
                if round_ % 2:
                    mode = list(MODES)[1 - list(MODES).index(mode)]
                url, pid = servers[mode]
                batch[name].append(batch_throughput(tagger, sets[name]))
                server_cpu, client_cpu = cpu_seconds(pid), time.process_time()
                seconds, latencies = asyncio.run(load(url, clients, args.requests, sets[name]))
                rows[name, clients, mode].append(dict(
                    per_second=args.requests / seconds,
                    batch_per_second=batch[name][-1],
                    of_batch=args.requests / seconds / batch[name][-1],
                    p50_ms=1e3 * np.percentile(latencies, 50),
                    p99_ms=1e3 * np.percentile(latencies, 99),
                    server_cpu_ms=1e3 * (cpu_seconds(pid) - server_cpu) / args.requests,
                    client_cpu_ms=1e3 * (time.process_time() - client_cpu) / args.requests))
                print(f'round {round_ + 1}, {name}, {clients} clients, {mode}: '
                      f'{rows[name, clients, mode][-1]}', flush=True)
            loads.append(os.getloadavg()[0])
    print(f'\n{args.requests} single-sentence requests per measurement, {args.rounds} rounds; '
          f'{os.cpu_count()} cores ({cpu_name()}); load average '
          f'(1 min) {" / ".join(f"{x:.1f}" for x in loads)} before and after each round; '
          'predict_lines in batches of 32, sentences/s: ' + ', '.join(
              f'{name} {spread(values, 1)}' for name, values in batch.items()) + '\n')
    print('| sentences | clients | server | requests/s | predict_lines sentences/s | of batch '
          '| p50 ms | p99 ms | server CPU ms / request | client CPU ms / request |')
    print('|---|--:|---|--:|--:|--:|--:|--:|--:|--:|')
    for (name, clients, mode), runs in rows.items():
        share = spread([100 * r['of_batch'] for r in runs]) + ' %'
        print(f'| {name} | {clients} | {mode} | {spread([r["per_second"] for r in runs])} | '
              f'{spread([r["batch_per_second"] for r in runs])} | {share} | '
              f'{spread([r["p50_ms"] for r in runs])} | {spread([r["p99_ms"] for r in runs])} | '
              f'{spread([r["server_cpu_ms"] for r in runs], 1)} | '
              f'{spread([r["client_cpu_ms"] for r in runs], 1)} |')
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as f:
            json.dump(dict(requests=args.requests, rounds=args.rounds, load_average=loads,
                           cpu=cpu_name(),
                           cores=os.cpu_count(), batch_per_second=batch,
                           rows=[dict(sentences=n, clients=c, server=m, runs=r)
                                 for (n, c, m), r in rows.items()]), f, indent=1)


if __name__ == '__main__':
    main()
