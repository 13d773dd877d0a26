"""Resident memory of ``python -m crf_lr.serve`` under requests of every shape: one client sends
1-64 texts of 1-126 characters each, both drawn at random (seeded), for ``--periods`` periods of
``--seconds``; the server's resident memory (RSS) is read at its start and after each period.

Each batch of windows is a product shape whose kernels oneDNN compiles and keeps in its primitive
cache (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``): one server a capacity of ``--capacities``, in turn
(``server``: as ``crf_lr.serve`` sizes it, the variable unset; a number: set to it). Prints one
JSON line per server.

    $ python benchmarks/serve_memory.py runs/ner/model --capacities server 8192
"""
import argparse
import importlib.util
import json
import os
import random
import time
import urllib.request

from serve_load import cpu_name

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    'serve_page', os.path.join(os.path.dirname(HERE), 'tools', 'serve_page.py'))
serve_page = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve_page)

TEXT = '李明昨天去了北京。中国科学院的专家来到云南考察'
VARIABLE = 'ONEDNN_PRIMITIVE_CACHE_CAPACITY'


def resident_mb(pid):
    """The resident memory of process ``pid``, in MB."""
    with open(f'/proc/{pid}/status', encoding='ascii') as f:
        kilobytes = next(int(line.split()[1]) for line in f if line.startswith('VmRSS:'))
    return round(kilobytes / 1024)


def send_random_shapes(url, seconds, rng):
    """Requests of random shapes, one at a time, for ``seconds``; how many were answered."""
    stop, answered = time.time() + seconds, 0
    while time.time() < stop:
        length, count = rng.randint(1, 126), rng.randint(1, 64)
        texts = [(TEXT * 6)[:length]] * count
        request = urllib.request.Request(f'{url}/v1/predict', json.dumps(
            {'texts': texts}).encode(), {'Content-Type': 'application/json'})
        with urllib.request.urlopen(request, timeout=120) as answer:
            answer.read()
        answered += 1
    return answered


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('model_dir')
    parser.add_argument('--capacities', nargs='+', default=['server', '8192'],
                        help="'server' (the variable unset) or a number (default: %(default)s)")
    parser.add_argument('--seconds', type=float, default=45)
    parser.add_argument('--periods', type=int, default=4)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    for capacity in args.capacities:
        os.environ.pop(VARIABLE, None)
        if capacity != 'server':
            os.environ[VARIABLE] = str(int(capacity))
        rng = random.Random(args.seed)
        with serve_page.running_server(args.model_dir) as (url, pid):
            rss, requests = [resident_mb(pid)], 0
            for _ in range(args.periods):
                requests += send_random_shapes(url, args.seconds, rng)
                rss.append(resident_mb(pid))
        print(json.dumps(dict(capacity=capacity, resident_mb=rss, requests=requests,
                              seconds=args.seconds, cpu=cpu_name(), cores=os.cpu_count())),
              flush=True)


if __name__ == '__main__':
    main()
