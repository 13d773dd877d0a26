"""Serve a saved model over HTTP: a JSON API that micro-batches concurrent requests, and a page.

    python -m crf_lr.serve runs/ner/model                  # then open http://127.0.0.1:8000/
    curl -s 127.0.0.1:8000/v1/predict -H 'Content-Type: application/json' \\
         -d '{"texts": ["中共中央总书记江泽民发表新年讲话"]}'
    # {"results": [{"entities": [{"start": 0, "end": 4, "type": "ORG", "text": "中共中央"}, ...]}]}

Endpoints: ``POST /v1/predict`` ``{"texts": [str, ...]}`` -> ``{"results": [...]}``, per text
``{"entities": [{"start", "end", "type", "text", "confidence"}], "path_probability": p}``
(character offsets, end exclusive; what ``crf_lr.predict.predict_records`` gives but the text) or
``{"words": [...], "confidences": [...], "path_probability": p}`` for a segmentation model;
``GET /v1/model`` the model card; ``GET /v1/transitions`` a CRF's transition matrix and the
scheme's allowed moves; ``GET /healthz``; ``GET /`` the page.

Requests that arrive while the model runs, or within ``--batch-wait-ms`` of the first, are run
as one padded batch of at most ``--max-batch`` texts (``--max-batch 1``: one request, one batch).
Bad input is a 4xx answer with a one-line JSON ``{"error": ...}``: see :data:`LIMITS`.
Requires the ``serve`` extra (``pip install '.[serve]'``); binds to 127.0.0.1 unless told.
"""
import argparse
import asyncio
import concurrent.futures
import contextlib
import errno
import json
import logging
import os
import socket

from crf_lr.runs import check_model_folder

# Stated limits of one POST /v1/predict request (a 100,000-character text fits: it is windowed).
LIMITS = dict(max_body_bytes=2 * 1024 * 1024, max_texts=64, max_chars=200_000)
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'static')


class MicroBatcher:
    """Runs ``predict(texts) -> results`` on the texts of concurrent requests at once.

    One worker takes the first waiting request, adds those that arrive within ``wait_ms`` (or are
    already waiting) until the batch holds ``max_batch`` texts, and runs ``predict`` on them in
    one thread (the event loop keeps answering meanwhile); each request gets its own results.
    When a batch of several requests fails, each runs again alone: the error is only that of the
    requests that fail alone, and the others get their results.

        >>> batcher = MicroBatcher(lambda texts: predict_lines(tagger, texts), 64, 2)
        >>> await batcher.start(); results = await batcher(['北京欢迎你'])
    """

    def __init__(self, predict, max_batch=64, wait_ms=2.0):
        self.predict, self.max_batch, self.wait = predict, max_batch, wait_ms / 1000
        self.queue, self.worker = None, None
        self.thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix='model')

    async def start(self):
        self.queue = asyncio.Queue()
        self.worker = asyncio.create_task(self._work())

    async def stop(self):
        self.worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.worker
        self.thread.shutdown(wait=True)

    async def __call__(self, texts):
        future = asyncio.get_running_loop().create_future()
        await self.queue.put((texts, future))
        return await future

    async def _collect(self):
        """The next batch: ``[(texts, future), ...]``."""
        loop = asyncio.get_running_loop()
        batch = [await self.queue.get()]
        size, deadline = len(batch[0][0]), loop.time() + self.wait
        while size < self.max_batch:
            try:
                left = deadline - loop.time()
                item = (self.queue.get_nowait() if left <= 0 else
                        await asyncio.wait_for(self.queue.get(), left))
            except (asyncio.QueueEmpty, asyncio.TimeoutError):
                break
            batch.append(item)
            size += len(item[0])
        return batch

    async def _work(self):
        while True:
            batch = await self._collect()
            if len(batch) > 1 and await self._answer(batch, fail=False):
                continue
            for item in batch:     # one request alone, or each of a batch that failed: whose fault
                await self._answer([item], fail=True)

    async def _answer(self, batch, fail):
        """Run ``predict`` on the texts of ``batch`` and give each request its results; False when
        it raised, after passing the error on to every request of ``batch`` if ``fail``."""
        texts = [text for request, _ in batch for text in request]
        try:
            results = await asyncio.get_running_loop().run_in_executor(self.thread, self.predict,
                                                                        texts)
        except Exception as error:                     # the server answers 500 and goes on
            for _, future in batch if fail else ():
                if not future.done():
                    future.set_exception(error)
            return False
        begin = 0
        for request, future in batch:
            if not future.done():                      # not when the client has gone
                future.set_result(results[begin:begin + len(request)])
            begin += len(request)
        return True


def _read_json(path):
    if not os.path.isfile(path):
        return {}
    with open(path, encoding='utf-8') as f:
        return json.load(f)


def model_card(tagger, model_dir):
    """What ``GET /v1/model`` answers: the model's task, encoder, labels, scheme, dev score and
    training command (the last three from the run folder above ``model_dir`` when there)."""
    run_dir = os.path.dirname(os.path.abspath(model_dir))
    run, results = _read_json(os.path.join(run_dir, 'run.json')), _read_json(
        os.path.join(run_dir, 'results.json'))
    config = results.get('config') or run.get('config') or {}
    head = tagger.head
    encoder = results.get('encoder') or {}
    return dict(task='segmentation' if head.scheme.segmentation else 'ner',
                head=head.name, scheme=head.scheme.name, types=head.types, labels=head.labels,
                units=tagger.encoder.units, maxlen=tagger.maxlen,
                encoder=encoder.get('encoder') or config.get('encoder'),
                metric=results.get('metric'), dev=results.get('best'),
                best_epoch=results.get('best_epoch'), test=results.get('test'),
                command=results.get('command') or run.get('command'),
                has_transitions=hasattr(head, 'crf'), model_dir=os.path.abspath(model_dir))


def transitions(tagger):
    """A CRF head's learned transitions ``[from][to]`` with the scheme's allowed moves (None for
    heads without a CRF)."""
    head = tagger.head
    if not hasattr(head, 'crf'):
        return None
    allowed, starts, ends = head.scheme.allowed(head.labels)
    return dict(labels=head.labels, scheme=head.scheme.name,
                transitions=head.crf.trans.numpy().tolist(),
                allowed=allowed.tolist(), allowed_starts=starts.tolist(),
                allowed_ends=ends.tolist())


class BadRequest(Exception):
    """A client error: ``status`` and a one-line message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class _KeyGivenTwice(ValueError):
    """A JSON object that names one key twice (``json`` would keep the last value silently)."""


def _object_once(pairs):
    """The dict of a JSON object's ``(key, value)`` pairs; :class:`_KeyGivenTwice` for a key
    that comes twice."""
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise _KeyGivenTwice(key)
        seen.add(key)
    return dict(pairs)


async def read_texts(request, limits):
    """The ``texts`` of a ``POST /v1/predict`` request, or :class:`BadRequest`."""
    kind, _, parameters = request.headers.get('content-type', '').partition(';')
    charset = parameters.strip().lower().replace(' ', '')
    if kind.strip().lower() != 'application/json' or charset not in ('', 'charset=utf-8'):
        raise BadRequest(415, 'send the body as Content-Type: application/json (UTF-8)')
    limit = limits['max_body_bytes']
    declared = request.headers.get('content-length', '')
    too_large = BadRequest(413, f'the body exceeds the limit of {limit} bytes')
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    try:
        payload = json.loads(body.decode('utf-8'), object_pairs_hook=_object_once)
    except _KeyGivenTwice as error:
        raise BadRequest(400, f'the body gives the key {error.args[0]!r} twice') from None
    except UnicodeDecodeError as error:
        raise BadRequest(400, f'the body is not UTF-8: byte {error.start} is invalid') from None
    except json.JSONDecodeError as error:
        raise BadRequest(400, f'the body is not valid JSON: {error}') from None
    except RecursionError:
        raise BadRequest(400, 'the body nests arrays or objects too deeply to decode') from None
    if not isinstance(payload, dict) or set(payload) != {'texts'}:
        raise BadRequest(400, 'expected a JSON object {"texts": [str, ...]} and nothing else')
    texts = payload['texts']
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise BadRequest(400, '"texts" must be a list of strings')
    if len(texts) > limits['max_texts']:
        raise BadRequest(413, f'{len(texts)} texts: at most {limits["max_texts"]} texts a request')
    if sum(map(len, texts)) > limits['max_chars']:
        raise BadRequest(413, f'{sum(map(len, texts))} characters: at most '
                              f'{limits["max_chars"]} characters a request')
    for k, text in enumerate(texts):
        try:
            text.encode('utf-8')
        except UnicodeEncodeError:
            raise BadRequest(400, f'texts[{k}] holds a lone surrogate (not a character)') from None
    return texts


def create_app(tagger, model_dir, max_batch=64, batch_wait_ms=2.0, limits=None):
    """The Starlette application serving ``tagger`` (see the module docstring).

        >>> app = create_app(Tagger.load('runs/ner/model'), 'runs/ner/model')
        >>> with TestClient(app) as client: client.post('/v1/predict', json={'texts': ['...']})
    """
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import FileResponse, JSONResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    from crf_lr.predict import predict_records
    limits = dict(LIMITS, **(limits or {}))
    batcher = MicroBatcher(lambda texts: predict_records(tagger, texts), max_batch, batch_wait_ms)
    card = dict(model_card(tagger, model_dir), limits=limits)
    matrix = transitions(tagger)

    def error(status, message):
        return JSONResponse({'error': message}, status_code=status)

    async def predict(request):
        try:
            texts = await read_texts(request, limits)
        except BadRequest as bad:
            return error(bad.status, str(bad))
        try:
            results = await batcher(texts)
        except Exception as failure:                   # logged; the server goes on
            logging.getLogger('crf_lr.serve').exception('prediction failed')
            return error(500, f'{type(failure).__name__}: {failure}'.splitlines()[0])
        return JSONResponse({'results': [{k: v for k, v in record.items() if k != 'text'}
                                          for record in results]})

    async def model(request):
        return JSONResponse(card)

    async def transition_matrix(request):
        if matrix is None:
            return error(404, f'a {tagger.head.name} head has no transition matrix')
        return JSONResponse(matrix)

    async def health(request):
        return JSONResponse({'status': 'ok'})

    async def page(request):
        return FileResponse(os.path.join(STATIC, 'index.html'))

    async def http_error(request, exc):
        return error(exc.status_code, exc.detail)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await batcher.start()
        yield
        await batcher.stop()

    routes = [Route('/', page), Route('/healthz', health), Route('/v1/model', model),
              Route('/v1/transitions', transition_matrix),
              Route('/v1/predict', predict, methods=['POST']),
              Mount('/static', StaticFiles(directory=STATIC), name='static')]
    return Starlette(routes=routes, lifespan=lifespan,
                     exception_handlers={HTTPException: http_error})


def bind(host, port):
    """A TCP socket bound to ``host:port``, not listening yet; SystemExit with one line when the
    address cannot be had (another process listens there, a host not of this machine)."""
    sock = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        hint = ('another process listens there: stop it or choose another --port'
                if error.errno == errno.EADDRINUSE else 'check --host and --port')
        raise SystemExit(f'python -m crf_lr.serve: error: cannot listen on {host}:{port}: '
                         f'{error.strerror or error} ({hint})') from None
    return sock


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m crf_lr.serve',
                                     description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog='\n\n'.join(__doc__.split('\n\n')[1:3]))
    parser.add_argument('model_dir', help='the model/ folder of a task script run')
    parser.add_argument('--host', default='127.0.0.1', help='(default: %(default)s, this '
                                                            'machine only)')
    parser.add_argument('--port', type=int, default=8000, help='(default: %(default)s)')
    parser.add_argument('--max-batch', type=int, default=64,
                        help='texts per model run (default: %(default)s; 1: no micro-batching)')
    parser.add_argument('--batch-wait-ms', type=float, default=2.0,
                        help='how long the first request of a batch waits for others '
                             '(default: %(default)s)')
    parser.add_argument('--precision', choices=('float32', 'mixed_bfloat16', 'auto'),
                        default='float32', help='compute precision (default: %(default)s)')
    parser.add_argument('--verbose', action='store_true', help="log every request and "
                                                               "TensorFlow's start-up lines")
    args = parser.parse_args(argv)
    if args.max_batch < 1 or args.batch_wait_ms < 0:
        parser.error('--max-batch must be >= 1 and --batch-wait-ms >= 0')
    if not 0 <= args.port <= 65535:
        parser.error(f'--port must be 0-65535 (0: any free port), not {args.port}')
    try:
        check_model_folder(args.model_dir)              # before TensorFlow loads: answers at once
        import starlette  # noqa: F401
        import uvicorn
    except (FileNotFoundError, ValueError, ImportError) as error:
        parser.error(f"{error} (the server needs pip install 'crf_lr[serve]')"
                     if isinstance(error, ImportError) else str(error))
    sock = bind(args.host, args.port)                  # before the model loads: answers at once
    from crf_lr.cli import quiet_tensorflow
    quiet_tensorflow(args.verbose, native=argv is None)   # not when a test calls main
    from crf_lr.precision import set_precision
    from crf_lr.predict import predict_lines
    from crf_lr.tagger import Tagger
    set_precision(args.precision)
    try:
        tagger = Tagger.load(args.model_dir, batch_size=max(args.max_batch, 32))
    except (OSError, ValueError) as error:
        parser.error(str(error))
    predict_lines(tagger, ['warm up'])                  # traced before the first request
    app = create_app(tagger, args.model_dir, args.max_batch, args.batch_wait_ms)
    sock.listen(2048)                                  # connections queue from here on
    port = sock.getsockname()[1]                       # the one chosen, for --port 0
    print(f'serving {args.model_dir} on http://{args.host}:{port}/ (Ctrl-C stops)',
          flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level='info' if args.verbose else 'warning'))
    with contextlib.suppress(KeyboardInterrupt):        # uvicorn raises Ctrl-C again once stopped
        server.run(sockets=[sock])


if __name__ == '__main__':
    main()
