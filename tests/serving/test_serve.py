"""``crf_lr.serve`` through Starlette's TestClient: the API answers as ``predict_lines`` does, the
model card reads the run folder, micro-batching groups concurrent requests, and every bad input
is a 4xx with a one-line JSON error after which the server still answers. The command line, in a
subprocess: it says it serves once the port takes connections, and a busy port is one line.

Oracles: ``crf_lr.serving.predict.predict_lines`` on the same texts, the CRF layer's weights and the
scheme's allowed transitions, the run files written here, and the texts themselves (a 100,000-
character text built from one sentence whose entities the trained model finds).
"""
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest

pytest.importorskip('starlette', reason="the server needs pip install '.[serve]'")
pytest.importorskip('httpx', reason="Starlette's TestClient needs pip install '.[serve]'")

SENTENCE = '张三去北京工作。'


@pytest.fixture(scope='module')
def ner(trained_ner_dir, tmp_path_factory):
    """The trained tiny NER model in a run folder (run.json, results.json): its Tagger, a
    TestClient of its app and its folder."""
    import shutil

    from starlette.testclient import TestClient

    from crf_lr.serving.serve import create_app
    from crf_lr.serving.tagger import Tagger
    run = tmp_path_factory.mktemp('run')
    shutil.copytree(trained_ner_dir, run / 'model')
    (run / 'run.json').write_text(json.dumps(dict(config=dict(encoder='tiny'), command='python x')))
    (run / 'results.json').write_text(json.dumps(dict(
        command='python examples/task_ner.py --train-file t.txt', metric='dev_f1', best=0.5,
        best_epoch=3, encoder=dict(encoder='/srv/encoders/random:1:16'), test=dict(f1=0.25),
        splits=dict(test='/srv/data/fixed.jsonl (format jsonl detected: line 1 opens a JSON '
                         'object)'),
        epochs=[dict(epoch=k, time=f'2026-11-2{k} 10:00:00') for k in (2, 3, 4)])))
    tagger = Tagger.load(str(run / 'model'))
    with TestClient(create_app(tagger, str(run / 'model'))) as client:
        yield tagger, client, str(run / 'model')


@pytest.fixture(scope='module')
def segmenter(tmp_path_factory):
    """A tiny random softmax segmentation model (no run folder, no CRF) and its TestClient."""
    from starlette.testclient import TestClient

    from crf_lr.compat import keras
    from crf_lr.serving.serve import create_app
    from crf_lr.serving.tagger import Tagger
    from helpers.tiny_models import save_random_tagger
    keras.utils.set_random_seed(3)
    model_dir = save_random_tagger(str(tmp_path_factory.mktemp('segmenter')), 'softmax', (),
                                   'SEG', 16)
    tagger = Tagger.load(model_dir)
    with TestClient(create_app(tagger, model_dir)) as client:
        yield tagger, client


def _one_line_error(response, status):
    assert response.status_code == status, response.text
    assert response.headers['content-type'] == 'application/json'
    assert list(response.json()) == ['error'] and '\n' not in response.text
    return response.json()['error']


def test_entities_are_those_of_predict_records(ner):
    """Entities with their confidences, and each text's path probability, as
    ``crf_lr.serving.predict`` gives them."""
    from crf_lr.serving.predict import predict_records
    tagger, client, _ = ner
    texts = ['张三去北京工作', '我们喜欢上海的天气。', '', '今天很好']
    response = client.post('/v1/predict', json={'texts': texts})
    assert response.status_code == 200
    results = response.json()['results']
    assert results == [dict(entities=r['entities'], path_probability=r['path_probability'],
                            path_log_probability=r['path_log_probability'])
                       for r in predict_records(tagger, texts)]
    assert all(0 < r['path_probability'] <= 1 for r in results)
    assert all(r['path_log_probability'] == pytest.approx(np.log(r['path_probability']))
               for r in results)
    assert [(e['start'], e['end'], e['type']) for e in results[0]['entities']] == \
        [(0, 2, 'PER'), (3, 5, 'LOC')]
    assert all(texts[k][e['start']:e['end']] == e['text']
               for k, result in enumerate(results) for e in result['entities'])
    assert results[2]['entities'] == []                       # the empty text: no entities
    assert client.post('/v1/predict', json={'texts': []}).json() == {'results': []}


def test_words_of_a_segmentation_model(segmenter):
    from crf_lr.serving.predict import predict_records
    tagger, client = segmenter
    texts = ['我们喜欢北京的天气。', '张三 去上海']
    results = client.post('/v1/predict', json={'texts': texts}).json()['results']
    assert results == [{k: v for k, v in r.items() if k != 'text'}
                       for r in predict_records(tagger, texts)]
    assert set(results[0]) == {'words', 'confidences', 'path_probability', 'path_log_probability'}
    assert [''.join(r['words']) for r in results] == [t.replace(' ', '') for t in texts]


def test_model_card_reads_labels_and_the_run_folder(ner, segmenter):
    """The card names no file of the server's (model folder, encoder folder, training command)
    unless told to (``--card-details``)."""
    from starlette.testclient import TestClient

    from crf_lr.serving.serve import create_app
    tagger, client, model_dir = ner
    answer = client.get('/v1/model')
    card = answer.json()
    assert {k: card[k] for k in ('task', 'head', 'scheme', 'types', 'labels', 'maxlen')} == dict(
        task='ner', head='crf', scheme='BIO', types=['LOC', 'PER'], labels=tagger.head.labels,
        maxlen=32)
    assert (card['encoder'], card['metric'], card['dev'], card['best_epoch'], card['trained']) == (
        'random:1:16', 'dev_f1', 0.5, 3, '2026-11-23 10:00:00')
    assert card['has_transitions'] and card['limits']['max_texts'] == 64
    assert (card['test'], card['test_data']) == (          # which file the last test scored
        {'f1': 0.25}, 'fixed.jsonl (format jsonl detected: line 1 opens a JSON object)')
    assert not {'command', 'model_dir'} & set(card)
    assert '/srv' not in answer.text and 'task_ner' not in answer.text and '/tmp' not in answer.text
    with TestClient(create_app(tagger, model_dir, card_details=True)) as detailed:
        card = detailed.get('/v1/model').json()
    assert (card['encoder'], card['command'], card['model_dir']) == (
        '/srv/encoders/random:1:16', 'python examples/task_ner.py --train-file t.txt',
        model_dir)
    assert card['test_data'].startswith('/srv/data/fixed.jsonl (')
    card = segmenter[1].get('/v1/model').json()
    assert (card['task'], card['dev'], card['trained'], card['has_transitions']) == (
        'segmentation', None, None, False)
    assert client.get('/healthz').json() == {'status': 'ok'}


def test_transitions_are_the_crf_weights_with_the_scheme_moves(ner, segmenter):
    tagger, client, _ = ner
    matrix = client.get('/v1/transitions').json()
    allowed, starts, ends = tagger.head.scheme.allowed(tagger.head.labels)
    assert matrix['labels'] == tagger.head.labels
    np.testing.assert_allclose(matrix['transitions'], tagger.head.crf.trans.numpy())
    assert matrix['allowed'] == allowed.tolist() and not all(map(all, matrix['allowed']))
    assert (matrix['allowed_starts'], matrix['allowed_ends']) == (starts.tolist(), ends.tolist())
    assert 'softmax head has no transition' in _one_line_error(
        segmenter[1].get('/v1/transitions'), 404)


def test_page_and_its_files_are_served(ner):
    client = ner[1]
    page = client.get('/')
    assert page.status_code == 200 and 'text/html' in page.headers['content-type']
    for name in ('app.js', 'app.css'):
        assert f'/static/{name}' in page.text
        assert client.get(f'/static/{name}').status_code == 200
    assert 'http' not in page.text.replace('http-equiv', '')      # offline: nothing fetched


def test_a_100000_character_text_is_windowed(ner):
    client = ner[1]
    text = SENTENCE * (100_000 // len(SENTENCE))
    assert len(text) == 100_000
    entities = client.post('/v1/predict', json={'texts': [text]}).json()['results'][0]['entities']
    expected = [(at + s, at + e, kind) for at in range(0, len(text), len(SENTENCE))
                for s, e, kind in ((0, 2, 'PER'), (3, 5, 'LOC'))]
    assert [(e['start'], e['end'], e['type']) for e in entities] == expected


@pytest.mark.parametrize('request_kwargs, status, message', [
    (dict(content=b'{"texts": ["a"'), 400, 'not valid JSON'),
    (dict(content=b'{"texts": ["a"]}', headers={'content-type': 'text/plain'}), 415,
     'application/json'),
    (dict(content=b'{"texts": ["a"]}',
          headers={'content-type': 'application/json; charset=latin-1'}),
     415, 'UTF-8'),
    (dict(content=b'{"texts": ["\xff\xfe"]}'), 400, 'not UTF-8'),
    (dict(json={'texts': ['a'] * 65}), 413, 'at most 64'),
    (dict(json={'texts': ['a' * 100_000, 'b' * 100_001]}), 413, 'at most 200000 characters'),
    (dict(content=b'{"texts": ["' + b'a' * (2 * 1024 * 1024) + b'"]}'), 413, '2097152 bytes'),
    (dict(json={'text': 'a'}), 400, 'expected a JSON object'),
    (dict(json=['a']), 400, 'expected a JSON object'),
    (dict(json={'texts': 'abc'}), 400, 'list of strings'),
    (dict(json={'texts': ['a', 1]}), 400, 'list of strings'),
    (dict(content=b'{"texts": ["\\ud800"]}'), 400, 'lone surrogate'),
    (dict(content=b'[' * 100_000 + b']' * 100_000), 400, 'too deeply'),
    (dict(content=b'{"texts": ["a"], "texts": ["b"]}'), 400, "gives the key 'texts' twice"),
    (dict(content=b'{"texts": [' + b'7' * 5000 + b']}'), 400, 'texts[0] is a number'),
    (dict(content=b'{"texts": ["a", 1e999]}'), 400, 'texts[1] is a number'),
    (dict(content=b'{"texts": [NaN]}'), 400, 'NaN is not JSON'),
    (dict(json={'texts': [None]}), 400, 'texts[0] is null'),
    (dict(json={'texts': ['a', True]}), 400, 'texts[1] is true or false'),
    (dict(json={'texts': [['a']]}), 400, 'texts[0] is an array'),
    (dict(json={'texts': [{'text': 'a'}]}), 400, 'texts[0] is an object'),
    (dict(json={'texts': ['a'], 'min_confidence': 2}), 400, '"min_confidence" must be'),
    (dict(json={'texts': ['a'], 'min_confidence': True}), 400, '"min_confidence" must be'),
    (dict(json={'texts': ['a'], 'marginals': 'yes'}), 400, '"marginals" must be true or false'),
    (dict(json={'texts': ['a'], 'offsets': 'utf32'}), 400, "'codepoint', 'utf16', 'byte'"),
    (dict(json={'texts': ['a'], 'timeout_s': 0}), 400, '"timeout_s" must be'),
    (dict(content=b'{"texts": ["a"], "timeout_s": 1e999}'), 400, '"timeout_s" must be'),
])
def test_bad_input_is_a_one_line_4xx_and_the_server_goes_on(ner, request_kwargs, status, message):
    client = ner[1]
    if 'content' in request_kwargs:
        request_kwargs = dict(request_kwargs, headers=request_kwargs.get(
            'headers', {'content-type': 'application/json'}))
    assert message in _one_line_error(client.post('/v1/predict', **request_kwargs), status)
    after = client.post('/v1/predict', json={'texts': ['张三去北京工作']})
    assert after.status_code == 200 and len(after.json()['results'][0]['entities']) == 2


@pytest.mark.parametrize('content_type', [
    'application/json; charset="utf-8"', 'application/json;charset=UTF8',
    'application/json; charset=utf-8; profile=x', 'Application/JSON ; charset = "UTF-8"'])
def test_json_with_any_spelling_of_utf8_is_read(ner, content_type):
    answer = ner[1].post('/v1/predict', content='{"texts": ["张三去北京工作"]}'.encode(),
                         headers={'content-type': content_type})
    assert answer.status_code == 200, answer.text
    assert len(answer.json()['results'][0]['entities']) == 2


def test_wrong_method_and_path_are_json_errors(ner):
    """Each says what to do: the method the path takes, the path meant by a trailing slash
    (it was an empty-bodied 307)."""
    client = ner[1]
    assert _one_line_error(client.get('/v1/predict'), 405) == (
        'Method Not Allowed: /v1/predict takes POST')
    assert client.get('/v1/predict').headers['allow'] == 'POST'
    assert set(client.post('/v1/model').headers['allow'].split(', ')) == {'GET', 'HEAD'}
    assert _one_line_error(client.get('/v2/nothing'), 404) == 'Not Found'
    assert _one_line_error(client.post('/v1/predict/', json={'texts': ['张三']}), 404) == (
        'Not Found: did you mean /v1/predict?')
    assert _one_line_error(client.get('/static'), 404) == 'Not Found'     # a mount: no page


def test_openapi_describes_the_request_and_its_options(ner):
    schema = ner[1].get('/openapi.json').json()
    body = schema['paths']['/v1/predict']['post']['requestBody']['content'][
        'application/json']['schema']
    assert set(body['properties']) == {'texts', 'min_confidence', 'marginals', 'offsets',
                                       'timeout_s'}
    assert body['properties']['offsets']['enum'] == ['codepoint', 'utf16', 'byte']
    assert body['properties']['texts']['maxItems'] == 64
    assert {'/v1/model', '/healthz', '/readyz', '/metrics'} <= set(schema['paths'])
    # every answer a client can get (499 is counted for one that left: it never sees it)
    assert set(schema['paths']['/v1/predict']['post']['responses']) == {
        '200', '400', '408', '413', '415', '500', '503', '504'}


def test_options_min_confidence_and_marginals_are_those_of_predict_records(ner, segmenter):
    from crf_lr.serving.predict import predict_records
    tagger, client, _ = ner
    texts = ['张三去北京工作', '我们喜欢上海的天气。']
    threshold = sorted(e['confidence'] for r in predict_records(tagger, texts)
                       for e in r['entities'])[1]          # drops the least confident
    for options in (dict(min_confidence=threshold), dict(marginals=True)):
        answer = client.post('/v1/predict', json=dict(texts=texts, **options)).json()
        expected = predict_records(tagger, texts, **options)
        assert answer['results'] == [{k: v for k, v in r.items() if k != 'text'}
                                     for r in expected]
    assert 'segments words' in _one_line_error(segmenter[1].post(
        '/v1/predict', json={'texts': ['a'], 'min_confidence': 0.5}), 400)


def test_offsets_count_code_points_utf16_units_or_bytes(ner):
    """After astral characters (emoji), UTF-16 offsets slice a JavaScript string right and byte
    offsets the UTF-8 bytes; code points (the default) a Python string."""
    from crf_lr.serving.predict import predict_lines
    tagger, client, _ = ner
    text = '😀😀张三去北京工作。𝔸é'
    mentions = [e['text'] for e in predict_lines(tagger, [text])[0]]
    assert mentions[:2] == ['张三', '北京']
    spans = {}
    for unit in ('codepoint', 'utf16', 'byte'):
        answer = client.post('/v1/predict', json={'texts': [text], 'offsets': unit,
                                                  'marginals': True}).json()['results'][0]
        spans[unit] = [(e['start'], e['end']) for e in answer['entities']]
        units = {'codepoint': text, 'utf16': text.encode('utf-16-le'), 'byte': text.encode()}[
            unit]
        size = 2 if unit == 'utf16' else 1
        decode = {'codepoint': str, 'utf16': lambda b: b.decode('utf-16-le'),
                  'byte': lambda b: b.decode()}[unit]
        assert [decode(units[s * size:e * size]) for s, e in spans[unit]] == mentions
        assert [decode(units[s * size:e * size]) for s, e in answer['offsets']] == list(text)
    assert {unit: found[:2] for unit, found in spans.items()} == dict(
        codepoint=[(2, 4), (5, 7)], utf16=[(4, 6), (7, 9)], byte=[(8, 14), (17, 23)])


def _serve(model_dir, port, *flags, **kwargs):
    """``python -m crf_lr.serve model_dir --port port *flags`` in a subprocess."""
    return subprocess.Popen([sys.executable, '-m', 'crf_lr.serve', model_dir, '--port', str(port),
                             *flags],
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                            text=True, **kwargs)


def test_the_serving_line_comes_once_the_port_takes_connections(trained_ner_dir, tmp_path):
    """With --port 0 the line names the port the system chose."""
    log = tmp_path / 'serve.log'
    with open(log, 'w') as out:
        server = _serve(trained_ner_dir, 0, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while '/ (Ctrl-C' not in log.read_text() and server.poll() is None \
                and time.time() < deadline:
            time.sleep(0.02)
        line = log.read_text()
        assert line.startswith(f'serving {trained_ner_dir} on http://127.0.0.1:'), line
        port = int(line.split('127.0.0.1:')[1].split('/')[0])
        assert port > 0
        while 'precision: ' not in log.read_text() and time.time() < deadline:
            time.sleep(0.02)
        from crf_lr.model.precision import native_bf16      # the default, auto, says what it became
        used = 'mixed_bfloat16' if native_bf16() else 'float32'
        assert log.read_text().splitlines()[1].startswith(f'precision: auto -> {used} (')
        with urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=30) as answer:
            assert json.load(answer) == {'status': 'ok'}     # at once: no retry
    finally:
        server.terminate()
        server.wait(30)


def _port_once_serving(server, log):
    """The port of ``server`` (from :func:`_serve`, its output in ``log``) once it serves."""
    deadline = time.time() + 120
    while '/ (Ctrl-C' not in log.read_text():
        assert server.poll() is None and time.time() < deadline, log.read_text()
        time.sleep(0.05)
    return int(log.read_text().split('127.0.0.1:')[1].split('/')[0])


def test_sigterm_says_so_and_does_not_wait_for_a_body_still_arriving(trained_ner_dir, tmp_path):
    """A client trickling its body when SIGTERM comes: it gets a 503 and the process exits at
    once, after a line saying it stops (it waited in silence for --body-timeout-s, 20 s here,
    30 by default: past Docker's 10 s before its SIGKILL)."""
    import signal
    log = tmp_path / 'serve.log'
    with open(log, 'w') as out:
        server = _serve(trained_ner_dir, 0, '--body-timeout-s', '20', stdout=out,
                        stderr=subprocess.STDOUT)
    try:
        port = _port_once_serving(server, log)
        with socket.create_connection(('127.0.0.1', port), timeout=15) as client:
            client.sendall(b'POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: '
                           b'application/json\r\nContent-Length: 100\r\n\r\n{"texts": ["')
            time.sleep(0.3)                                 # the request is in flight
            began = time.time()
            server.send_signal(signal.SIGTERM)
            answer = b''
            with contextlib.suppress(OSError):
                while chunk := client.recv(65536):
                    answer += chunk
        server.wait(15)
        assert time.time() - began < 5, time.time() - began
        assert answer.startswith(b'HTTP/1.1 503 '), answer
        assert json.loads(answer.partition(b'\r\n\r\n')[2]) == {
            'error': 'the server is stopping: its body had not all come'}
        assert log.read_text().splitlines()[-1] == (
            'stopping (SIGTERM): no new connections; answering the 1 request in flight (a body '
            'still arriving: 503); Ctrl-C again quits at once')
    finally:
        server.kill()
        server.wait(30)


def test_a_low_ulimit_of_open_files_is_raised_to_the_connections_allowed(trained_ner_dir,
                                                                          tmp_path):
    """Started under a soft limit of 200 open files (the hard one higher), 300 idle
    connections: a request beside them is answered (it was refused without an answer or a line
    in the log until connections closed)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1024 + 256:
        pytest.skip(f'the hard limit of open files, {hard}, is below what the test raises to')
    log = tmp_path / 'serve.log'
    with open(log, 'w') as out:
        server = _serve(trained_ner_dir, 0, stdout=out, stderr=subprocess.STDOUT,
                        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard)))
    idle = []
    try:
        port = _port_once_serving(server, log)
        for _ in range(300):
            idle.append(socket.create_connection(('127.0.0.1', port), timeout=10))
            idle[-1].sendall(b'GET /healthz HTTP/1.1\r\nHost: x\r\n')    # no end of head
        time.sleep(0.5)
        import httpx
        answer = httpx.post(f'http://127.0.0.1:{port}/v1/predict', json={'texts': [SENTENCE]},
                            timeout=5)
        assert answer.status_code == 200
        assert 'open files' not in log.read_text()
    finally:
        for connection in idle:
            connection.close()
        server.kill()
        server.wait(30)


def test_a_busy_port_is_one_line_before_the_model_loads(trained_ner_dir):
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.time()
        server = _serve(trained_ner_dir, port, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = server.communicate(timeout=60)
        finally:
            server.kill()
    assert server.returncode != 0 and out == '', out            # no "serving" line
    assert err == (f'python -m crf_lr.serve: error: cannot listen on 127.0.0.1:{port}: Address '
                   'already in use (another process listens there: stop it or choose another '
                   '--port)\n')
    assert time.time() - started < 30                             # TensorFlow never loaded


def test_the_server_sizes_onednns_cache_before_its_model_loads(trained_ner_dir, monkeypatch):
    """crf_lr.serve calls size_for_serving before the model's first product (what it does is
    tests/patches/test_compat.py's)."""
    from crf_lr.serving import serve
    from crf_lr.serving.tagger import Tagger
    order = []
    monkeypatch.setattr(serve, 'size_for_serving', lambda: order.append('sized'))

    def load(*args, **kwargs):
        order.append('loaded')
        raise OSError('stopped here')
    monkeypatch.setattr(Tagger, 'load', load)
    with pytest.raises(SystemExit):
        serve.main([trained_ner_dir, '--port', '0'])
    assert order == ['sized', 'loaded']


def test_ctrl_c_while_the_model_loads_is_one_line(trained_ner_dir, monkeypatch, capsys):
    """Ctrl-C before uvicorn takes the signals (TensorFlow importing, the model loading) was a
    KeyboardInterrupt traceback of 30-80 lines from inside the imports; now it is one line and
    the shell's status for Ctrl-C, 130."""
    from crf_lr.serving import serve
    from crf_lr.serving.tagger import Tagger

    def load(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(Tagger, 'load', load)
    try:                 # not pytest.raises: a KeyboardInterrupt let through would stop pytest
        serve.main([trained_ner_dir, '--port', '0'])
    except BaseException as error:          # what main lets out is the point
        stopped = error
    assert isinstance(stopped, SystemExit) and stopped.code == 130, repr(stopped)
    assert capsys.readouterr().err == (
        'python -m crf_lr.serve: stopped (Ctrl-C) while the model loaded\n')


def test_a_port_taken_while_the_model_loaded_is_one_line():
    """Two servers started together: both bind (SO_REUSEADDR, neither listens yet), the first
    to load its model listens, the second's listen failed with a traceback."""
    from crf_lr.serving.serve import bind, listen
    first = bind('127.0.0.1', 0)
    port = first.getsockname()[1]
    second = bind('127.0.0.1', port)
    try:
        listen(first, '127.0.0.1', port)
        with pytest.raises(SystemExit, match=(
                rf'^python -m crf_lr.serve: error: cannot listen on 127.0.0.1:{port}: Address '
                r'already in use \(another process began to listen there while the model '
                r'loaded: stop it or choose another --port\)$')):
            listen(second, '127.0.0.1', port)
        assert second.fileno() == -1                               # closed
    finally:
        first.close()


@pytest.mark.parametrize('port', ['99999', '-1'])
def test_a_port_out_of_range_is_one_line(port, capsys):
    from crf_lr.serving.serve import main
    with pytest.raises(SystemExit) as stopped:
        main(['no_such_model', '--port', port])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f'python -m crf_lr.serve: error: --port must be 0-65535 (0: any free port), not {port}')


def _batcher_run(batcher, *coroutines):
    """Run ``coroutines`` (functions of the started ``batcher``) together; their results."""
    async def main():
        await batcher.start()
        try:
            return await asyncio.gather(*(c(batcher) for c in coroutines),
                                        return_exceptions=True)
        finally:
            await batcher.stop()
    return asyncio.run(main())


def test_micro_batching_groups_concurrent_requests():
    from crf_lr.serving.serve import MicroBatcher
    runs = []

    def predict(texts):
        runs.append(list(texts))
        time.sleep(0.02)                       # a model run: requests pile up meanwhile
        if 'boom' in texts:
            raise RuntimeError('model failed')
        return [text.upper() for text in texts]

    def clients(batcher, requests):
        return _batcher_run(batcher, *(lambda b, r=r: b(r) for r in requests))

    requests = [[f'r{k}a', f'r{k}b'] if k % 3 == 0 else [f'r{k}'] for k in range(24)]
    answers = clients(MicroBatcher(predict, max_batch=8, wait_ms=5), requests)
    assert answers == [[text.upper() for text in r] for r in requests]   # each gets its own
    assert len(runs) < len(requests) and max(map(len, runs)) >= 4
    assert all(len(run) <= 8 for run in runs)
    runs.clear()
    answers = clients(MicroBatcher(predict, max_batch=1, wait_ms=5), [['x'], ['boom'], ['y']])
    assert runs == [['x'], ['boom'], ['y']]               # one request, one batch
    assert answers[0] == ['X'] and isinstance(answers[1], RuntimeError) and answers[2] == ['Y']


def test_a_failing_model_is_a_500_and_the_server_goes_on(ner, monkeypatch):
    tagger, client, _ = ner
    original = tagger.fill

    def fill(windows):
        if any('爆' in window.units for window, _ in windows):
            raise RuntimeError('out of memory\nsecond line')
        return original(windows)
    monkeypatch.setattr(tagger, 'fill', fill)
    error = _one_line_error(client.post('/v1/predict', json={'texts': ['爆']}), 500)
    assert error == 'RuntimeError: out of memory'
    assert client.post('/v1/predict', json={'texts': ['张三']}).status_code == 200


def test_a_failing_request_fails_alone_and_the_others_of_its_batch_are_answered():
    """A request that fails the model's run took every request batched with it down; the batch
    runs again request by request, so the failure is the failing request's alone."""
    from crf_lr.serving.serve import MicroBatcher
    runs = []

    def predict(texts):
        runs.append(list(texts))
        if 'boom' in texts:
            raise RuntimeError('model failed')
        return [text.upper() for text in texts]

    answers = _batcher_run(MicroBatcher(predict, max_batch=8, wait_ms=200),
                           *(lambda b, r=r: b(r) for r in (['x'], ['boom', 'z'], ['y'])))
    assert runs == [['x', 'boom', 'y', 'z'], ['x'], ['boom', 'z'], ['y']]   # in turn
    assert answers[0] == ['X'] and isinstance(answers[1], RuntimeError) and answers[2] == ['Y']


def test_a_word_longer_than_a_window_is_answered_with_the_requests_batched_with_it(tmp_path):
    """A word model's text holding a word of more pieces than a window (16 of 6) was a 500 for
    its request and every request batched with it; each now gets its answer, as
    ``predict_records`` gives it (the word read as [UNK])."""
    from starlette.testclient import TestClient

    from crf_lr.serving.predict import predict_records
    from crf_lr.serving.serve import create_app
    from crf_lr.serving.tagger import Tagger
    from helpers.tiny_models import save_random_tagger
    model_dir = save_random_tagger(str(tmp_path), 'crf', ['LOC', 'PER'], 'BIO', 8, units='words')
    tagger = Tagger.load(model_dir)
    texts = ['peter runs in london', 'eu' + 's' * 15 + ' call', 'eu rejects german lamb']
    expected = predict_records(tagger, texts)
    answers = [None] * len(texts)
    with TestClient(create_app(tagger, model_dir, batch_wait_ms=500)) as client:
        def ask(k):
            answers[k] = client.post('/v1/predict', json={'texts': [texts[k]]})
        threads = [threading.Thread(target=ask, args=(k,)) for k in range(len(texts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [a.status_code for a in answers] == [200] * len(texts)
    for answer, record in zip(answers, expected):
        (result,) = answer.json()['results']
        assert result['path_probability'] == pytest.approx(record['path_probability'])
        assert ([(e['start'], e['end'], e['type']) for e in result['entities']]
                == [(e['start'], e['end'], e['type']) for e in record['entities']])


def test_concurrent_clients_get_their_own_answers(ner):
    from crf_lr.serving.predict import predict_lines
    tagger, client, _ = ner
    texts = ['张三去北京工作', '我们喜欢上海', '今天很好', '张三去上海'] * 4
    expected = predict_lines(tagger, texts)
    answers = [None] * len(texts)

    def ask(k):
        answers[k] = client.post('/v1/predict', json={'texts': [texts[k]]}).json()
    threads = [threading.Thread(target=ask, args=(k,)) for k in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a['results'][0]['entities'] for a in answers] == expected
    assert all(0 < a['results'][0]['path_probability'] <= 1 for a in answers)


def _slow_upper(runs, seconds=0.05):
    def run(items):
        runs.append(list(items))
        time.sleep(seconds)
        return [item.upper() for item in items]
    return run


def test_a_batch_waits_only_for_requests_on_their_way():
    """A request alone runs at once, however long the batch wait; one that comes while another
    is on its way (inside ``expecting``) waits for it, and the two run in one batch."""
    from crf_lr.serving.serve import MicroBatcher
    runs, took = [], []

    async def alone(batcher):
        began = time.perf_counter()
        await batcher(['a'])
        took.append(time.perf_counter() - began)

    async def first(batcher):
        await asyncio.sleep(0.1)
        return await batcher(['b'])

    async def on_its_way(batcher):
        await asyncio.sleep(0.1)
        with batcher.expecting():
            await asyncio.sleep(0.05)                  # its body is being read
            task = asyncio.ensure_future(batcher(['c']))
            await asyncio.sleep(0)
        return await task
    answers = _batcher_run(MicroBatcher(_slow_upper(runs, 0), max_batch=8, wait_ms=1000), alone,
                           first, on_its_way)
    assert took[0] < 0.5 and answers[1:] == [['B'], ['C']]
    assert runs == [['a'], ['b', 'c']]


def test_a_long_request_shares_batches_and_a_short_one_is_answered_first():
    """A request of 40 items and a later one of 1: the later one's item runs in the second
    batch, with the long one's, and it is answered long before the long one."""
    from crf_lr.serving.serve import MicroBatcher
    runs, answered = [], []

    async def long(batcher):
        answered.append(('long', await batcher([f'l{k}' for k in range(40)])))

    async def short(batcher):
        await asyncio.sleep(0.02)                      # while the first batch runs
        answered.append(('short', await batcher(['s'])))
    _batcher_run(MicroBatcher(_slow_upper(runs), max_batch=4, wait_ms=0), long, short)
    assert runs[0] == ['l0', 'l1', 'l2', 'l3'] and runs[1] == ['l4', 's', 'l5', 'l6']
    assert answered == [('short', ['S']), ('long', [f'L{k}' for k in range(40)])]


def test_a_cancelled_request_is_dropped_before_its_items_and_between_them():
    from crf_lr.serving.serve import MicroBatcher
    runs = []

    async def leaves(batcher):                          # its client leaves mid-way
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(batcher([f'l{k}' for k in range(40)]), 0.08)

    async def never_runs(batcher):
        await asyncio.sleep(0.01)                      # while the first batch runs
        task = asyncio.ensure_future(batcher(['gone']))
        await asyncio.sleep(0.01)
        task.cancel()

    async def stays(batcher):
        await asyncio.sleep(0.3)
        return await batcher(['s'])
    answers = _batcher_run(MicroBatcher(_slow_upper(runs), max_batch=4, wait_ms=0), leaves,
                           never_runs, stays)
    assert answers[2] == ['S']
    ran = [item for run in runs for item in run]
    assert 'gone' not in ran and 4 <= sum(item.startswith('l') for item in ran) <= 12
    assert runs[-1] == ['s']


def test_a_full_queue_refuses_and_a_deadline_drops():
    from crf_lr.serving.serve import MicroBatcher, QueueFull
    runs, answered = [], []

    async def first(batcher):
        try:
            return await batcher(['a', 'b'])
        finally:
            answered.append(True)

    async def beyond(batcher):
        await asyncio.sleep(0.01)
        return await batcher(['c'])                     # 2 wait, at most 2: refused

    async def late(batcher):
        while not answered:                             # the queue has room again
            await asyncio.sleep(0.01)
        return await batcher(['d', 'e'], deadline=asyncio.get_running_loop().time() - 1)
    answers = _batcher_run(MicroBatcher(_slow_upper(runs, 0.1), max_batch=1, wait_ms=0,
                                        max_queue=2), first, beyond, late)
    assert answers[0] == ['A', 'B'] and isinstance(answers[1], QueueFull)
    assert isinstance(answers[2], TimeoutError) and runs == [['a'], ['b']]


@pytest.fixture()
def stalled(ner, monkeypatch):
    """The ner app with a model that waits for ``release`` (a threading.Event) before a batch
    that holds '停', and a TestClient of it with --max-queue 2."""
    from starlette.testclient import TestClient

    from crf_lr.serving.serve import create_app
    tagger, _, model_dir = ner
    release, original = threading.Event(), tagger.fill

    def fill(windows):
        if any('停' in window.units for window, _ in windows):
            release.wait(30)
        return original(windows)
    monkeypatch.setattr(tagger, 'fill', fill)
    with TestClient(create_app(tagger, model_dir, max_queue=2, batch_wait_ms=0)) as client:
        yield client, release
        release.set()


def test_a_request_beyond_the_queue_is_refused_before_its_texts_are_cut(stalled, ner,
                                                                        monkeypatch):
    """One text waits, the queue holds 2: a request of 2 texts is a 503 at once, without its
    windows cut first in the thread that decodes other requests' answers."""
    client, release = stalled
    tagger, cut = ner[0], []
    original = tagger.windows
    monkeypatch.setattr(tagger, 'windows', lambda sequences: cut.append(len(sequences)) or
                        original(sequences))
    held = threading.Thread(target=client.post, args=('/v1/predict',),
                            kwargs=dict(json={'texts': ['停']}))
    held.start()
    deadline = time.time() + 30
    while client.get('/readyz').json().get('queue_texts') != 1 and time.time() < deadline:
        time.sleep(0.01)
    answer = client.post('/v1/predict', json={'texts': ['张三', '李四']})
    assert _one_line_error(answer, 503) == ('1 text waits already (--max-queue 2): retry later')
    release.set()
    held.join()
    assert cut == [1]                                 # the held request's text only


def test_a_full_queue_is_a_503_with_retry_after_and_not_ready(stalled):
    client, release = stalled
    held = threading.Thread(target=client.post, args=('/v1/predict',),
                            kwargs=dict(json={'texts': ['停', '停']}))
    held.start()
    deadline = time.time() + 30
    while client.get('/readyz').status_code == 200 and time.time() < deadline:
        time.sleep(0.01)
    answer = client.post('/v1/predict', json={'texts': ['张三']})
    assert 'retry later' in _one_line_error(answer, 503) and answer.headers['retry-after'] == '1'
    assert 'full' in _one_line_error(client.get('/readyz'), 503)
    release.set()
    held.join()
    assert client.get('/readyz').json() == {'status': 'ready', 'queue_texts': 0}
    assert client.post('/v1/predict', json={'texts': ['张三']}).status_code == 200


def test_a_request_past_its_deadline_is_a_504(stalled):
    client, release = stalled
    held = threading.Thread(target=client.post, args=('/v1/predict',),
                            kwargs=dict(json={'texts': ['停']}))
    held.start()
    time.sleep(0.2)
    began = time.time()
    answer = client.post('/v1/predict', json={'texts': ['张三'], 'timeout_s': 0.3})
    assert 'deadline of 0.3 s' in _one_line_error(answer, 504)
    assert time.time() - began < 5
    release.set()
    held.join()


def test_metrics_count_requests_queue_batches_latency_and_load_time(ner):
    client = ner[1]

    def metrics():
        answer = client.get('/metrics')
        assert answer.headers['content-type'].startswith('text/plain')
        return dict(line.rsplit(' ', 1) for line in answer.text.splitlines()
                    if not line.startswith('#'))
    before = metrics()
    client.post('/v1/predict', json={'texts': ['张三去北京工作', '上海']})
    client.post('/v1/predict', json={'texts': 1})
    client.get('/nothing/here')
    after = metrics()
    for name, more in (('crf_lr_requests_total{route="/v1/predict",status="200"}', 1),
                       ('crf_lr_requests_total{route="/v1/predict",status="400"}', 1),
                       ('crf_lr_requests_total{route="other",status="404"}', 1),
                       ('crf_lr_requests_total{route="/metrics",status="200"}', 1),
                       ('crf_lr_batch_windows_sum', 2), ('crf_lr_batch_windows_count', 1),
                       ('crf_lr_request_seconds_count{route="/v1/predict"}', 2)):
        assert float(after[name]) - float(before.get(name, 0)) == more, name
    assert after['crf_lr_queue_texts'] == '0.0' and after['crf_lr_model_load_seconds'] == '0.0'
    assert client.get('/readyz').json()['status'] == 'ready'


@pytest.fixture(scope='module', params=['httptools', 'h11'])
def served(trained_ner_dir, tmp_path_factory, request):
    """``python -m crf_lr.serve`` of the trained model on a free port with either HTTP parser, a
    connection without a whole request head closed after 2 s; yields its base URL. Under the
    default precision (bf16 where the CPU has it) it says that its weights are frozen."""
    from crf_lr.model.precision import native_bf16
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        port = probe.getsockname()[1]
    log = tmp_path_factory.mktemp('served') / 'serve.log'
    with open(log, 'w') as out:
        server = subprocess.Popen(
            [sys.executable, '-m', 'crf_lr.serve', trained_ner_dir, '--port', str(port),
             '--headers-timeout-s', '2', '--http', request.param], stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        deadline = time.time() + 120
        while '/ (Ctrl-C' not in log.read_text():
            assert server.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.05)
        assert ('weights: bf16 constants' in log.read_text()) == bool(native_bf16())
        yield f'http://127.0.0.1:{port}'
        assert 'Traceback' not in log.read_text(), log.read_text()
    finally:
        server.terminate()
        server.wait(30)


def _metric(url, name):
    import httpx
    text = httpx.get(f'{url}/metrics').text
    return float(next(line.split()[-1] for line in text.splitlines()
                      if line.startswith(name + ' ')))


def test_a_client_that_leaves_has_its_work_dropped_and_short_requests_go_on(served):
    """A 200,000-character request (about 6,700 windows) whose client leaves after 1 s: the
    windows run stop growing at once, and a short request sent meanwhile is answered at
    once."""
    import httpx
    text = SENTENCE * (200_000 // len(SENTENCE))
    before = _metric(served, 'crf_lr_batch_windows_sum')

    def short():
        began = time.time()
        answer = httpx.post(f'{served}/v1/predict', json={'texts': [SENTENCE]}, timeout=30)
        assert answer.status_code == 200
        return time.time() - began
    latencies = []
    sender = threading.Timer(0.5, lambda: latencies.append(short()))
    with httpx.Client(timeout=1) as leaving:
        sender.start()
        with pytest.raises(httpx.ReadTimeout):
            leaving.post(f'{served}/v1/predict', json={'texts': [text]})
    sender.join()                  # the short request answered: its window is counted by now
    time.sleep(1)
    ran = _metric(served, 'crf_lr_batch_windows_sum') - before
    time.sleep(1)
    assert _metric(served, 'crf_lr_batch_windows_sum') - before == ran < 6000
    # within a few batches, not after the long text's ~6,700 windows (tens of seconds); the
    # bound leaves room for a loaded machine (the suite's other worker trains beside it)
    assert latencies and latencies[0] < 5.0, latencies
    assert _metric(served, 'crf_lr_queue_texts') == 0


def test_a_client_gone_mid_body_is_a_499_without_a_traceback(served):
    """Half of a declared body, then a reset: a 499 in the metrics (it was a 500, each with a
    40-line traceback in the log, which the fixture checks at its end)."""
    import httpx
    import struct
    port = int(served.rsplit(':', 1)[1])

    def count(status):
        series = f'crf_lr_requests_total{{route="/v1/predict",status="{status}"}} '
        return sum(float(line.split()[-1]) for line in
                   httpx.get(f'{served}/metrics').text.splitlines() if line.startswith(series))
    before = count('499'), count('500')
    for _ in range(3):
        with socket.create_connection(('127.0.0.1', port), timeout=10) as client:
            client.sendall(b'POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: '
                           b'application/json\r\nContent-Length: 1000\r\n\r\n{"texts": ["')
            time.sleep(0.2)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
    deadline = time.time() + 10
    while count('499') < before[0] + 3 and time.time() < deadline:
        time.sleep(0.1)
    assert (count('499'), count('500')) == (before[0] + 3, before[1])


def test_a_connection_stopped_mid_headers_is_closed(served):
    """Slowloris: a byte of header every 0.5 s keeps no connection past --headers-timeout-s."""
    port = int(served.rsplit(':', 1)[1])
    with socket.create_connection(('127.0.0.1', port), timeout=10) as slow:
        slow.sendall(b'POST /v1/predict HTTP/1.1\r\nHost: x\r\n')
        began, closed = time.time(), False
        while time.time() - began < 8 and not closed:
            try:
                slow.sendall(b'X')
                slow.settimeout(0.5)
                closed = slow.recv(1024) == b''
            except socket.timeout:
                continue
            except OSError:
                closed = True
        assert closed and time.time() - began < 4


def _send_all(connection, data):
    """Send ``data``, as much as the server takes before it answers and closes."""
    with contextlib.suppress(OSError):
        connection.sendall(data)


@pytest.mark.parametrize('head', [b'GARBAGE\r\n\r\n',
                                  b'GET /' + b'a' * (1 << 20) + b' HTTP/1.1\r\nHost: x\r\n\r\n',
                                  b'GET / HTTP/1.1\r\nHost: x\r\nX: ' + b'a' * (1 << 20)
                                  + b'\r\n\r\n'])
def test_a_request_that_cannot_be_parsed_is_a_json_400(served, head):
    port = int(served.rsplit(':', 1)[1])
    answer = b''
    with socket.create_connection(('127.0.0.1', port), timeout=10) as client:
        threading.Thread(target=_send_all, args=(client, head), daemon=True).start()
        with contextlib.suppress(ConnectionResetError):
            while chunk := client.recv(65536):
                answer += chunk
    status, _, rest = answer.partition(b'\r\n')
    headers, _, body = rest.partition(b'\r\n\r\n')
    assert status == b'HTTP/1.1 400 Bad Request'
    assert b'content-type: application/json' in headers.lower()
    assert 'malformed HTTP request' in json.loads(body)['error']
