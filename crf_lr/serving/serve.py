"""Serve a saved model over HTTP: a JSON API that micro-batches concurrent requests, and a page.

    python -m crf_lr.serve runs/ner/model                  # then open http://127.0.0.1:8000/
    curl -s 127.0.0.1:8000/v1/predict -H 'Content-Type: application/json' \\
         -d '{"texts": ["中共中央总书记江泽民发表新年讲话"]}'
    # {"results": [{"entities": [{"start": 0, "end": 4, "type": "ORG", ...}, ...]}]}

Endpoints: ``POST /v1/predict`` ``{"texts": [str, ...]}`` and the options ``min_confidence``,
``marginals``, ``offsets`` (``codepoint``, ``utf16``, ``byte``) and ``timeout_s`` ->
``{"results": [...]}``, per text what ``crf_lr.serving.predict.predict_records`` gives but the text;
``GET /v1/model`` the model card; ``GET /v1/transitions`` a CRF's transitions; ``GET /healthz``,
``GET /readyz``, ``GET /metrics`` (Prometheus), ``GET /openapi.json``; ``GET /`` the page.

The windows of the texts that wait run in batches of at most ``--max-batch``, one window of each
request in turn (a long text shares batches with short ones); at most ``--max-queue`` texts wait
(beyond: 503), each request within ``--timeout-s`` (beyond: 504); a request whose client leaves is
dropped. Bad input is a 4xx answer with a one-line JSON ``{"error": ...}``: see :data:`LIMITS`.
Requires the ``serve`` extra (``pip install '.[serve]'``); binds to 127.0.0.1 unless told.
"""
import argparse
import asyncio
import concurrent.futures
import contextlib
import errno
import itertools
import json
import logging
import os
import socket
import time

from crf_lr.utils.cli import ArgumentParser, add_precision_option
from crf_lr.serving.model_folder import check_model_folder
from crf_lr.speed.primitive_cache import size_for_serving
from crf_lr.serving.api import (BadRequest, answer_record, check_content_type, openapi,
                                parse_request, read_body)


FILES_BESIDE_CONNECTIONS = 256     # open files beside connections: the model, TensorFlow, sockets

# Stated limits of one POST /v1/predict request (a 100,000-character text fits: it is windowed).
LIMITS = dict(max_body_bytes=2 * 1024 * 1024, max_texts=64, max_chars=200_000)
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'static')


class QueueFull(Exception):
    """The batcher holds ``max_queue`` texts already: the request is refused (503)."""


class _Pending:
    """One request in the batcher: its items, the next one to run, its results so far."""

    def __init__(self, items, count, deadline, future):
        self.items, self.count, self.deadline, self.future = items, count, deadline, future
        self.next, self.results, self.left = 0, [None] * len(items), len(items)


class MicroBatcher:
    """Runs ``run(items) -> results`` on the items (a text's windows) of concurrent requests at
    once, ``max_batch`` items a run, taken from the waiting requests in turn.

    One worker waits up to ``wait_ms`` after the first waiting request for the requests on their
    way (inside :meth:`expecting`: a server's requests whose bodies are being read; none, no
    wait) unless ``max_batch`` items wait already, then fills a batch one item of each request
    at a time, oldest request first, and runs it in one thread (the event loop keeps answering
    meanwhile): a long text's items share batches with those of later short requests, which are
    answered without waiting for it. A request that is cancelled (its client left) or whose
    ``deadline`` (event loop time) passes is dropped: its items not yet run never run. At most
    ``max_queue`` texts (``count`` a request) wait in all: a request beyond is
    :class:`QueueFull`, unless none waits. When a batch of several requests fails, each
    request's items run again alone: the error is only that of the requests that fail alone.

        >>> batcher = MicroBatcher(lambda windows: read(windows), 64, 2)
        >>> await batcher.start(); results = await batcher(windows_of_a_request)
    """

    def __init__(self, run, max_batch=64, wait_ms=2.0, max_queue=None, on_batch=None):
        self.run, self.max_batch, self.wait = run, max_batch, wait_ms / 1000
        self.max_queue, self.on_batch = max_queue, on_batch or (lambda size: None)
        self.pending, self.waiting, self.arrived, self.worker = [], 0, None, None
        self.expected = 0
        self.thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix='model')

    async def start(self):
        self.arrived = asyncio.Event()
        self.worker = asyncio.create_task(self._work())

    async def stop(self):
        self.worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.worker
        self.thread.shutdown(wait=True)

    @contextlib.contextmanager
    def expecting(self):
        """A request on its way (read, cut into items) until it is queued or refused: a batch
        being formed meanwhile waits for it, up to ``wait_ms``."""
        self.expected += 1
        try:
            yield
        finally:
            self.expected -= 1
            if self.arrived is not None:
                self.arrived.set()

    @property
    def full(self):
        return self.max_queue is not None and self.waiting >= self.max_queue

    def refuses(self, count):
        """Why a request of ``count`` texts is refused now (others wait, and with it more than
        ``max_queue`` texts would), else None."""
        if self.max_queue is not None and self.waiting and self.waiting + count > self.max_queue:
            texts = '1 text waits' if self.waiting == 1 else f'{self.waiting} texts wait'
            return f'{texts} already (--max-queue {self.max_queue})'
        return None

    async def __call__(self, items, count=None, deadline=None):
        """The results of ``items``, in order; :class:`QueueFull`; TimeoutError once
        ``deadline`` passes before the last item runs. ``count``: the texts the request holds
        (default: one per item)."""
        count = len(items) if count is None else count
        if not items:
            return []
        refused = self.refuses(count)
        if refused:
            raise QueueFull(refused)
        pending = _Pending(items, count, deadline, asyncio.get_running_loop().create_future())
        self.pending.append(pending)
        self.waiting += count
        self.arrived.set()
        try:
            return await pending.future
        finally:
            pending.future.cancel()                    # no-op when answered; else dropped

    def _drop_finished(self, now):
        """Forget the requests answered, cancelled or past their deadline."""
        for pending in self.pending:
            if not pending.future.done() and pending.deadline is not None \
                    and now >= pending.deadline:
                pending.future.set_exception(TimeoutError('the deadline passed'))
            if pending.future.done():
                self.waiting -= pending.count
        self.pending = [p for p in self.pending if not p.future.done()]

    async def _collect(self):
        """The next batch: ``[(pending, item index), ...]``, one item per request in turn."""
        loop = asyncio.get_running_loop()
        while True:
            self._drop_finished(loop.time())
            if self.pending:
                break
            self.arrived.clear()
            await self.arrived.wait()
        if self.wait:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._more(), self.wait)
            self._drop_finished(loop.time())
        batch = []
        while len(batch) < self.max_batch:
            ready = [p for p in self.pending if p.next < len(p.items)]
            for pending in ready[:self.max_batch - len(batch)]:
                batch.append((pending, pending.next))
                pending.next += 1
            if not ready:
                break
        return batch

    async def _more(self):
        """Return once ``max_batch`` items wait or no request is on its way."""
        while self.expected and sum(len(p.items) - p.next for p in self.pending) \
                < self.max_batch:
            self.arrived.clear()
            await self.arrived.wait()

    async def _work(self):
        while True:
            batch = await self._collect()
            if not batch:
                continue
            self.on_batch(len(batch))
            requests = list(dict.fromkeys(pending for pending, _ in batch))
            if len(requests) > 1 and await self._answer(batch, fail=False):
                continue
            for request in requests:          # one request alone, or each of a batch that failed
                await self._answer([(p, k) for p, k in batch if p is request], fail=True)

    async def _answer(self, batch, fail):
        """Run the items of ``batch`` and give each request its results; False when it raised,
        after passing the error on to every request of ``batch`` if ``fail``."""
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self.thread, self.run, [pending.items[k] for pending, k in batch])
        except Exception as error:                     # the server answers 500 and goes on
            for pending in {p for p, _ in batch} if fail else ():
                if not pending.future.done():
                    pending.future.set_exception(error)
            return False
        for (pending, k), result in zip(batch, results):
            pending.results[k] = result
            pending.left -= 1
            if not pending.left and not pending.future.done():   # not when the client has gone
                pending.future.set_result(pending.results)
        return True


def _read_json(path):
    if not os.path.isfile(path):
        return {}
    with open(path, encoding='utf-8') as f:
        return json.load(f)


def model_card(tagger, model_dir, details=False):
    """What ``GET /v1/model`` answers: the model's task, head, scheme, types, labels, encoder,
    scores (with the test data they were measured on) and training date (the last three from the
    run folder above ``model_dir`` when there); the training command and the model folder only
    with ``details`` (they name the server's files)."""
    run_dir = os.path.dirname(os.path.abspath(model_dir))
    run, results = _read_json(os.path.join(run_dir, 'run.json')), _read_json(
        os.path.join(run_dir, 'results.json'))
    config = results.get('config') or run.get('config') or {}
    head = tagger.head
    encoder = results.get('encoder') or {}
    epochs = {record.get('epoch'): record for record in results.get('epochs') or []}
    trained = epochs.get(results.get('best_epoch'), {}).get('time')
    name = encoder.get('encoder') or config.get('encoder')
    card = dict(task='segmentation' if head.scheme.segmentation else 'ner',
                head=head.name, scheme=head.scheme.name, types=head.types, labels=head.labels,
                units=tagger.encoder.units, maxlen=tagger.maxlen,
                encoder=name if details or not name else os.path.basename(name.rstrip('/')),
                metric=results.get('metric'), dev=results.get('best'),
                best_epoch=results.get('best_epoch'), test=results.get('test'),
                test_data=_test_data((results.get('splits') or {}).get('test'), details),
                trained=trained, has_transitions=hasattr(head, 'crf'))
    if details:
        card.update(command=results.get('command') or run.get('command'),
                    model_dir=os.path.abspath(model_dir))
    return card


def _test_data(name, details):
    """What the card's ``test`` scores were measured on (a run's last scored test file, or its
    benchmark split): ``name`` as the run recorded it, a file by its base name unless
    ``details``."""
    if not name or details:
        return name
    path, opening, rest = name.partition(' (')
    return (os.path.basename(path) if os.path.isabs(path) else path) + opening + rest


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


class Metrics:
    """The server's Prometheus metrics, in a registry of their own."""

    def __init__(self, batcher, load_seconds):
        import prometheus_client as prometheus
        self.registry = prometheus.CollectorRegistry()
        self.requests = prometheus.Counter('crf_lr_requests', 'HTTP requests answered',
                                           ['route', 'status'], registry=self.registry)
        self.latency = prometheus.Histogram(
            'crf_lr_request_seconds', 'time to answer a request', ['route'],
            buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30), registry=self.registry)
        self.batch = prometheus.Histogram('crf_lr_batch_windows', 'windows per model run',
                                          buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                                          registry=self.registry)
        prometheus.Gauge('crf_lr_queue_texts', 'texts admitted and not yet answered',
                         registry=self.registry).set_function(lambda: batcher.waiting)
        prometheus.Gauge('crf_lr_model_load_seconds', 'time to load the model and warm it up',
                         registry=self.registry).set(load_seconds)
        self.exposition = lambda: (prometheus.generate_latest(self.registry),
                                   prometheus.CONTENT_TYPE_LATEST)


def _route_of(scope, paths):
    """The route a request's metrics are counted under (unknown paths in one)."""
    path = scope['path']
    return '/static' if path.startswith('/static/') else path if path in paths else 'other'


def create_app(tagger, model_dir, max_batch=64, batch_wait_ms=2.0, limits=None, max_queue=256,
               timeout_s=30.0, body_timeout_s=30.0, card_details=False, load_seconds=0.0,
               stopping=None):
    """The ASGI application serving ``tagger`` (see the module docstring). ``stopping``: an
    :class:`asyncio.Event` set when the server stops; a request whose body is still arriving
    then is a 503 at once (it would hold the stop up to ``body_timeout_s``).

        >>> app = create_app(Tagger.load('runs/ner/model'), 'runs/ner/model')
        >>> with TestClient(app) as client: client.post('/v1/predict', json={'texts': ['...']})
    """
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    from crf_lr.serving.predict import check_options, line_units, predict_records
    limits = dict(LIMITS, **(limits or {}))

    def read(items):
        """The model's reading of each of ``items`` (``(window, ids, marginals)``)."""
        tagger.fill([(window, ids) for window, ids, _ in items])
        return tagger.read([window for window, _, _ in items],
                           marginals=any(marginals for _, _, marginals in items))

    batcher = MicroBatcher(read, max_batch, batch_wait_ms, max_queue)
    metrics = Metrics(batcher, load_seconds)
    batcher.on_batch = metrics.batch.observe
    card = dict(model_card(tagger, model_dir, card_details), limits=limits)
    matrix = transitions(tagger)
    schema = openapi(limits)
    cpu = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix='texts')
    stopping = stopping or asyncio.Event()
    log = logging.getLogger('crf_lr.serve')

    def error(status, message, headers=None):
        return JSONResponse({'error': message}, status_code=status, headers=headers)

    def windows_of_texts(texts, marginals):
        """Every window of ``texts`` as the batcher's items, and per sequence its windows."""
        per_sequence = tagger.windows(line_units(tagger, texts)[1])
        return [(window, ids, marginals) for windows in per_sequence
                for window, ids in windows], [[w for w, _ in ws] for ws in per_sequence]

    def answer(texts, options, outputs, readings):
        predictions = tagger.decode(outputs, marginals=options.get('marginals', False),
                                    readings=readings)
        records = predict_records(tagger, texts, min_confidence=options.get('min_confidence'),
                                  marginals=options.get('marginals', False),
                                  predictions=predictions)
        return [answer_record(r, options.get('offsets', 'codepoint')) for r in records]

    async def body_or_stop(request):
        """The request's body; BadRequest 408 once ``body_timeout_s`` passes, 503 once the
        server stops, before it came whole."""
        reading = asyncio.ensure_future(read_body(request, limits['max_body_bytes']))
        stop = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait({reading, stop}, timeout=body_timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not reading.done():
            reading.cancel()
            if stopping.is_set():
                raise BadRequest(503, 'the server is stopping: its body had not all come')
            raise BadRequest(408, f'the body did not come within {body_timeout_s:g} s')
        return reading.result()

    async def gone(request):
        """Return once the client has disconnected."""
        while (await request.receive())['type'] != 'http.disconnect':
            pass

    async def predict(request):
        loop = asyncio.get_running_loop()
        began = loop.time()
        with batcher.expecting():            # a batch being formed waits for it
            try:
                check_content_type(request.headers.get('content-type', ''))
                body = await body_or_stop(request)
                texts, options = parse_request(body, limits)
                try:
                    check_options(tagger, options.get('min_confidence'), options.get('marginals'))
                except ValueError as bad:
                    raise BadRequest(400, str(bad).replace('--min-confidence', '"min_confidence"')
                                     .replace('--marginals', '"marginals"')) from None
                refused = batcher.refuses(len(texts))          # before its texts are cut
                if refused:
                    raise BadRequest(503, f'{refused}: retry later', {'Retry-After': '1'})
            except BadRequest as bad:
                return error(bad.status, str(bad), bad.headers)
            except ClientDisconnect:                 # gone before its body came whole
                return error(499, 'the client closed the connection')
            deadline = began + min(timeout_s, options.get('timeout_s', timeout_s))
            items, outputs = await loop.run_in_executor(cpu, windows_of_texts, texts,
                                                        options.get('marginals', False))
            work = asyncio.ensure_future(batcher(items, len(texts), deadline))
            await asyncio.sleep(0)                      # its items join the queue
        client_gone = asyncio.ensure_future(gone(request))
        try:
            await asyncio.wait({work, client_gone}, timeout=max(0, deadline - loop.time()),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            client_gone.cancel()
        if not work.done():
            work.cancel()                              # its windows not yet run never run
            if client_gone.done() and not client_gone.cancelled():
                return error(499, 'the client closed the connection')
        try:
            readings = await work
        except (asyncio.CancelledError, TimeoutError):
            return error(504, f'not answered within the deadline of '
                              f'{deadline - began:g} s (--timeout-s, "timeout_s")')
        except QueueFull as full:
            return error(503, f'{full}: retry later', {'Retry-After': '1'})
        except Exception as failure:                   # logged; the server goes on
            log.exception('prediction failed')
            return error(500, f'{type(failure).__name__}: {failure}'.splitlines()[0])
        ends = list(itertools.accumulate(map(len, outputs)))
        per_sequence = [readings[end - len(ws):end] for ws, end in zip(outputs, ends)]
        results = await loop.run_in_executor(
            cpu, answer, texts, options, outputs, [r for rs in per_sequence for r in rs])
        return JSONResponse({'results': results})

    async def model(request):
        return JSONResponse(card)

    async def transition_matrix(request):
        if matrix is None:
            return error(404, f'a {tagger.head.name} head has no transition matrix')
        return JSONResponse(matrix)

    async def health(request):
        return JSONResponse({'status': 'ok'})

    async def ready(request):
        if batcher.worker is None or batcher.full:
            return error(503, 'the queue is full' if batcher.full else 'not started',
                         {'Retry-After': '1'})
        return JSONResponse({'status': 'ready', 'queue_texts': batcher.waiting})

    async def exposition(request):
        content, media_type = metrics.exposition()
        return Response(content, media_type=media_type)

    async def page(request):
        return FileResponse(os.path.join(STATIC, 'index.html'))

    async def openapi_schema(request):
        return JSONResponse(schema)

    async def http_error(request, exc):
        detail = exc.detail
        allowed = (exc.headers or {}).get('Allow')
        if exc.status_code == 405 and allowed:
            detail += f': {request.url.path} takes {allowed}'
        elif exc.status_code == 404 and request.url.path.rstrip('/') in pages - {request.url.path}:
            detail += f': did you mean {request.url.path.rstrip("/")}?'
        return error(exc.status_code, detail, exc.headers)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await batcher.start()
        yield
        await batcher.stop()
        cpu.shutdown(wait=True)

    routes = [Route('/', page), Route('/healthz', health), Route('/readyz', ready),
              Route('/metrics', exposition), Route('/openapi.json', openapi_schema),
              Route('/v1/model', model), Route('/v1/transitions', transition_matrix),
              Route('/v1/predict', predict, methods=['POST']),
              Mount('/static', StaticFiles(directory=STATIC), name='static')]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error})
    app.router.redirect_slashes = False       # a JSON 404 naming the path, not an empty 307
    paths = {route.path for route in routes}
    pages = {route.path for route in routes if isinstance(route, Route)}

    async def counted(scope, receive, send):
        """The app, each HTTP request counted by route and status and timed."""
        if scope['type'] != 'http':
            return await app(scope, receive, send)
        route, began, status = _route_of(scope, paths), time.perf_counter(), [500]

        async def sending(message):
            if message['type'] == 'http.response.start':
                status[0] = message['status']
            await send(message)
        try:
            await app(scope, receive, sending)
        finally:
            metrics.requests.labels(route, status[0]).inc()
            metrics.latency.labels(route).observe(time.perf_counter() - began)
    return counted


def raise_open_files(connections):
    """Raise this process's soft limit of open files (``ulimit -n``) to what ``connections``
    connections need beside the model's files and threads, as far as the hard limit allows: past
    it, connections were refused without an answer or a line in the log, short of uvicorn's 503
    at ``--limit-concurrency``. A line when the hard limit is too low."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = connections + FILES_BESIDE_CONNECTIONS
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    raised = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
    resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised < needed:
        print(f'note: at most {raised} open files (the hard limit of ulimit -n): fewer than '
              f'--limit-concurrency {connections} connections can be open at once; beyond, '
              f'connections are refused without an answer', flush=True)


def bind(host, port):
    """A TCP socket bound to ``host:port``, not listening yet; SystemExit with one line when the
    address cannot be had (another process listens there, a host not of this machine)."""
    sock = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        raise _cannot_listen(sock, host, port, error, 'another process listens there') from None
    return sock


def listen(sock, host, port):
    """``sock`` (from :func:`bind`) listening; SystemExit with one line where another process
    began to listen on the port after the bind (a second server started while the first loaded
    its model: both could bind, only one can listen)."""
    try:
        sock.listen(2048)
    except OSError as error:
        raise _cannot_listen(sock, host, port, error, 'another process began to listen there '
                                                      'while the model loaded') from None


def _cannot_listen(sock, host, port, error, taken):
    sock.close()
    hint = (f'{taken}: stop it or choose another --port' if error.errno == errno.EADDRINUSE
            else 'check --host and --port')
    return SystemExit(f'python -m crf_lr.serve: error: cannot listen on {host}:{port}: '
                      f'{error.strerror or error} ({hint})')


MALFORMED = json.dumps({'error': 'malformed HTTP request (a request line or header that cannot '
                                  'be read, or a head too large)'}).encode()
MAX_HEAD_BYTES = 16 * 1024               # a request line and headers longer: a 400 (h11's limit)


def protocol(headers_timeout_s, http='auto'):
    """uvicorn's HTTP protocol, httptools' C parser (``http='httptools'``; ``'auto'``: when
    installed) or h11's pure-Python one (``'h11'``), with two changes: a connection that has not
    sent a whole request head (line and headers) ``headers_timeout_s`` after it opened or after
    its last answer is closed (uvicorn times only idle keep-alive connections, and any byte
    restarts that clock); a request that cannot be parsed (a garbage line, a head over
    :data:`MAX_HEAD_BYTES`) is answered with a JSON error instead of text."""
    if http == 'auto':
        try:
            import httptools  # noqa: F401
            http = 'httptools'
        except ImportError:
            http = 'h11'

    class HeadTimer:
        """Closes a connection that has not sent a whole request head in time."""
        head_timer = None
        awaiting_head = True                 # no whole request head since the last answer

        def _await_head(self):
            if self.head_timer is not None:
                self.head_timer.cancel()
            self.head_timer = self.loop.call_later(headers_timeout_s, self._head_late)

        def _head_late(self):
            if self.awaiting_head and not self.transport.is_closing():
                self.transport.close()           # no whole request head: nothing to answer

        def connection_made(self, transport):
            super().connection_made(transport)
            self._await_head()

        def connection_lost(self, exc):
            self.head_timer.cancel()
            super().connection_lost(exc)

        def send_400_response(self, msg):
            self.transport.write(
                b'HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n'
                b'connection: close\r\ncontent-length: %d\r\n\r\n%s'
                % (len(MALFORMED), MALFORMED))
            self.transport.close()

    if http == 'httptools':
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        class Protocol(HeadTimer, HttpToolsProtocol):
            head_bytes = 0

            def on_message_begin(self):
                super().on_message_begin()
                self.head_bytes = 0

            def _count(self, size):
                self.head_bytes += size
                if self.head_bytes > MAX_HEAD_BYTES:  # httptools sets no limit: a 400
                    raise ValueError('the request head is too large')

            def on_url(self, url):
                self._count(len(url))
                super().on_url(url)

            def on_header(self, name, value):
                self._count(len(name) + len(value) + 4)
                super().on_header(name, value)

            def on_headers_complete(self):
                self.awaiting_head = False
                super().on_headers_complete()

            def on_response_complete(self):
                self.awaiting_head = not self.pipeline   # a pipelined one came whole
                super().on_response_complete()
                self._await_head()
        return Protocol

    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Protocol(HeadTimer, H11Protocol):
        @property
        def awaiting_head(self):
            return self.conn.their_state is h11.IDLE

        def on_response_complete(self):
            super().on_response_complete()
            self._await_head()
    return Protocol


def stopping_server(config, stopping):
    """uvicorn's server of ``config`` that, when a signal (SIGTERM, Ctrl-C) stops it, says so in
    one line and sets ``stopping`` (the app's: bodies still arriving are answered 503) before
    uvicorn's graceful stop (no new connections, the requests in flight answered)."""
    import signal

    import uvicorn

    class Server(uvicorn.Server):
        signal_name = None

        def handle_exit(self, sig, frame):
            self.signal_name = self.signal_name or signal.Signals(sig).name
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets=None):
            flight = len(self.server_state.tasks)
            print(f'stopping ({self.signal_name or "asked"}): no new connections; answering the '
                  f'{flight} request{"s" * (flight != 1)} in flight (a body still arriving: 503); '
                  f'Ctrl-C again quits at once', flush=True)
            stopping.set()
            await super().shutdown(sockets)
    return Server(config)


def _load(args, parser, stopping, native=True):
    """``(app, precision line, frozen)``: the model of ``args.model_dir`` loaded, frozen unless
    ``--no-freeze``, warmed up and served by :func:`create_app` (``stopping``: its event); a
    model folder that cannot be read is ``parser.error``. ``native``: quiet TensorFlow's C++ log
    lines too (not when a test calls :func:`main`)."""
    size_for_serving()                 # oneDNN's 1,024 kernels: a server's shapes have no end
    from crf_lr.utils.cli import quiet_tensorflow
    quiet_tensorflow(args.verbose, native=native)
    from crf_lr.model.precision import set_precision
    from crf_lr.serving.predict import predict_lines
    from crf_lr.serving.tagger import Tagger
    precision = set_precision(args.precision)
    began = time.perf_counter()
    try:
        tagger = Tagger.load(args.model_dir, batch_size=max(args.max_batch, 32))
    except (OSError, ValueError) as error:
        parser.error(str(error))
    frozen = not args.no_freeze and tagger.freeze()      # bf16 weights as constants
    predict_lines(tagger, ['warm up'])                  # traced before the first request
    app = create_app(tagger, args.model_dir, args.max_batch, args.batch_wait_ms,
                     max_queue=args.max_queue, timeout_s=args.timeout_s,
                     body_timeout_s=args.body_timeout_s, card_details=args.card_details,
                     load_seconds=time.perf_counter() - began, stopping=stopping)
    return app, precision, frozen


def main(argv=None):
    parser = ArgumentParser(prog='python -m crf_lr.serve',
                            description=__doc__.split('\n\n')[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog='\n\n'.join(__doc__.split('\n\n')[1:3]))
    parser.add_argument('model_dir', help='the model/ folder of a task script run')
    parser.add_argument('--host', default='127.0.0.1', help='(default: %(default)s, this '
                                                            'machine only)')
    parser.add_argument('--port', type=int, default=8000, help='(default: %(default)s)')
    parser.add_argument('--max-batch', type=int, default=64,
                        help='windows per model run (default: %(default)s; 1: no '
                             'micro-batching)')
    parser.add_argument('--batch-wait-ms', type=float, default=2.0,
                        help='how long the first request of a batch waits for others '
                             '(default: %(default)s)')
    for flag, kind, default, what in (
            ('--max-queue', int, 256, 'texts admitted and not yet answered; a request beyond '
                                      'is a 503 with Retry-After'),
            ('--timeout-s', float, 30.0, 'deadline of a request, from its arrival; past it, a '
                                         '504 and its work dropped'),
            ('--headers-timeout-s', float, 10.0, 'a connection without a whole request head '
                                                 'this long after it opened or after its last '
                                                 'answer is closed'),
            ('--body-timeout-s', float, 30.0, 'a request body not all there this long after '
                                              'its head is a 408'),
            ('--keep-alive-s', int, 5, 'an idle keep-alive connection is closed after this long'),
            ('--limit-concurrency', int, 1024, "connections or requests at once; beyond, "
                                               "uvicorn's 503")):
        parser.add_argument(flag, type=kind, default=default,
                            help=what + ' (default: %(default)s)')
    parser.add_argument('--http', choices=('auto', 'httptools', 'h11'), default='auto',
                        help="the HTTP parser: httptools' (C) or h11's (Python); auto: "
                             'httptools when installed (default: %(default)s)')
    parser.add_argument('--card-details', action='store_true',
                        help='the model card names the model folder and the training command')
    add_precision_option(parser)
    parser.add_argument('--no-freeze', action='store_true',
                        help='under bf16, keep the weights variables (Tagger.freeze makes them '
                             'constants: faster one text at a time, more memory)')
    parser.add_argument('--verbose', action='store_true', help="log every request and "
                                                               "TensorFlow's start-up lines")
    args = parser.parse_args(argv)
    if args.max_batch < 1 or args.batch_wait_ms < 0 or args.max_queue < 1 \
            or args.limit_concurrency < 1:
        parser.error('--max-batch, --max-queue and --limit-concurrency must be >= 1 and '
                     '--batch-wait-ms >= 0')
    if min(args.timeout_s, args.headers_timeout_s, args.body_timeout_s, args.keep_alive_s) <= 0:
        parser.error('--timeout-s, --headers-timeout-s, --body-timeout-s and --keep-alive-s '
                     'must be > 0')
    if not 0 <= args.port <= 65535:
        parser.error(f'--port must be 0-65535 (0: any free port), not {args.port}')
    try:
        check_model_folder(args.model_dir)              # before TensorFlow loads: answers at once
        import prometheus_client  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn
        if args.http == 'httptools':
            import httptools  # noqa: F401
    except (FileNotFoundError, ValueError, ImportError) as error:
        parser.error(f"{error} (the server needs pip install 'crf_lr[serve]')"
                     if isinstance(error, ImportError) else str(error))
    raise_open_files(args.limit_concurrency)
    sock = bind(args.host, args.port)                  # before the model loads: answers at once
    stopping = asyncio.Event()
    try:
        app, precision, frozen = _load(args, parser, stopping, native=argv is None)
    except KeyboardInterrupt:                          # Ctrl-C before uvicorn takes signals
        sock.close()
        parser.exit(130, f'{parser.prog}: stopped (Ctrl-C) while the model loaded\n')
    listen(sock, args.host, args.port)                 # connections queue from here on
    port = sock.getsockname()[1]                       # the one chosen, for --port 0
    print(f'serving {args.model_dir} on http://{args.host}:{port}/ (Ctrl-C stops)\n{precision}'
          + ('\nweights: bf16 constants of the prediction step (faster one text at a time, more '
             'memory; --no-freeze keeps them variables)' if frozen else ''), flush=True)
    server = stopping_server(uvicorn.Config(
        app, log_level='info' if args.verbose else 'warning', lifespan='on',
        http=protocol(args.headers_timeout_s, args.http), timeout_keep_alive=args.keep_alive_s,
        limit_concurrency=args.limit_concurrency), stopping)
    with contextlib.suppress(KeyboardInterrupt):        # uvicorn raises Ctrl-C again once stopped
        server.run(sockets=[sock])


if __name__ == '__main__':
    main()
