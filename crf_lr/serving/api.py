"""The HTTP API's rules: a request's checks (`parse_request`, one-line 4xx errors), offsets in the
asked unit, the answer records, the OpenAPI description.
"""
import email.message
import itertools
import json


class BadRequest(Exception):
    """A client error: ``status``, a one-line message and response headers."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.headers = status, headers


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


def _no_constant(name):
    raise ValueError(f'{name} is not JSON')


OFFSET_UNITS = ('codepoint', 'utf16', 'byte')
# The request's options: name -> (accepted types, test, what it must be)
OPTIONS = dict(
    min_confidence=((int, float), lambda v: 0 <= v <= 1, 'a number in [0, 1]'),
    marginals=((bool,), lambda v: True, 'true or false'),
    offsets=((str,), lambda v: v in OFFSET_UNITS, 'one of ' + ', '.join(map(repr, OFFSET_UNITS))),
    timeout_s=((int, float), lambda v: 0 < v < float('inf'), 'a number of seconds > 0'))
JSON_TYPES = {str: 'a string', bool: 'true or false', int: 'a number', float: 'a number',
              list: 'an array', dict: 'an object', type(None): 'null'}


def check_content_type(value):
    """BadRequest 415 unless ``value`` is ``application/json``, with any parameters, a charset
    (quoted or not) being UTF-8 (``utf-8``, ``utf8``)."""
    header = email.message.Message()
    header['content-type'] = value
    charset = header.get_param('charset')
    if (value.split(';')[0].strip().lower() != 'application/json'
            or charset is not None and str(charset).lower() not in ('utf-8', 'utf8')):
        raise BadRequest(415, 'send the body as Content-Type: application/json (UTF-8)')


async def read_body(request, limit):
    """The request's body, at most ``limit`` bytes, or BadRequest 413."""
    declared = request.headers.get('content-length', '')
    too_large = BadRequest(413, f'the body exceeds the limit of {limit} bytes')
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)


def parse_request(body, limits):
    """``(texts, options)`` of a ``POST /v1/predict`` body, or :class:`BadRequest`. Numbers are
    read as floats (no digit string raises), ``NaN`` and ``Infinity`` refused."""
    try:
        payload = json.loads(body.decode('utf-8'), object_pairs_hook=_object_once,
                             parse_int=float, parse_constant=_no_constant)
    except _KeyGivenTwice as error:
        raise BadRequest(400, f'the body gives the key {error.args[0]!r} twice') from None
    except UnicodeDecodeError as error:
        raise BadRequest(400, f'the body is not UTF-8: byte {error.start} is invalid') from None
    except ValueError as error:                      # JSONDecodeError, NaN / Infinity
        raise BadRequest(400, f'the body is not valid JSON: {error}') from None
    except RecursionError:
        raise BadRequest(400, 'the body nests arrays or objects too deeply to decode') from None
    if not isinstance(payload, dict) or 'texts' not in payload or set(payload) - {
            'texts', *OPTIONS}:
        raise BadRequest(400, 'expected a JSON object {"texts": [str, ...]} and, if any, the '
                              'options ' + ', '.join(OPTIONS))
    texts = payload.pop('texts')
    if not isinstance(texts, list):
        raise BadRequest(400, f'"texts" must be a list of strings, not {JSON_TYPES[type(texts)]}')
    for k, text in enumerate(texts):
        if not isinstance(text, str):
            raise BadRequest(400, f'"texts" must be a list of strings: texts[{k}] is '
                                  f'{JSON_TYPES[type(text)]}')
    for name, value in payload.items():
        types, test, wanted = OPTIONS[name]
        if not isinstance(value, types) or isinstance(value, bool) != (bool in types) \
                or not test(value):
            raise BadRequest(400, f'"{name}" must be {wanted}')
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
    return texts, payload


def offsets_in(text, unit):
    """Where each code point boundary of ``text`` lies in ``unit``: a list of ``len(text) + 1``
    offsets (None for code points: the offsets themselves)."""
    if unit == 'codepoint':
        return None
    sizes = ([1 + (ord(c) > 0xFFFF) for c in text] if unit == 'utf16'
             else [len(c.encode('utf-8')) for c in text])
    return [0, *itertools.accumulate(sizes)]


def answer_record(record, unit):
    """A ``predict_records`` record as the API answers it: without its text, its offsets
    (entities', marginals') counted in ``unit``."""
    table = offsets_in(record.pop('text'), unit)
    if table is not None:
        for entity in record.get('entities', ()):
            entity['start'], entity['end'] = table[entity['start']], table[entity['end']]
        if 'offsets' in record:
            record['offsets'] = [[table[s], table[e]] for s, e in record['offsets']]
    return record


def openapi(limits):
    """The OpenAPI 3.1 description of the API (``GET /openapi.json``)."""
    error = {'description': 'a one-line error',
             'content': {'application/json': {'schema': {
                 'type': 'object', 'required': ['error'],
                 'properties': {'error': {'type': 'string'}}}}}}
    entity = {'type': 'object', 'properties': {
        'start': {'type': 'integer'}, 'end': {'type': 'integer', 'description': 'exclusive'},
        'type': {'type': 'string'}, 'text': {'type': 'string'},
        'confidence': {'type': ['number', 'null']}}}
    result = {'type': 'object', 'properties': {
        'entities': {'type': 'array', 'items': entity},
        'words': {'type': 'array', 'items': {'type': 'string'}},
        'confidences': {'type': 'array', 'items': {'type': 'number'}},
        'path_probability': {'type': ['number', 'null']},
        'path_log_probability': {'type': ['number', 'null'],
                                 'description': 'natural log; finite where the probability is 0'},
        'labels': {'type': 'array', 'items': {'type': 'string'}},
        'marginals': {'type': 'array', 'items': {'type': 'array', 'items': {'type': 'number'}}},
        'offsets': {'type': 'array', 'items': {'type': 'array', 'items': {'type': 'integer'}}}}}
    body = {'type': 'object', 'required': ['texts'], 'additionalProperties': False, 'properties': {
        'texts': {'type': 'array', 'maxItems': limits['max_texts'], 'items': {'type': 'string'},
                  'description': f'at most {limits["max_chars"]} characters in all'},
        'min_confidence': {'type': 'number', 'minimum': 0, 'maximum': 1,
                           'description': 'drop entities less confident'},
        'marginals': {'type': 'boolean', 'description': "each unit's label probabilities "
                                                        '(tag heads)'},
        'offsets': {'enum': list(OFFSET_UNITS), 'default': 'codepoint',
                    'description': 'what offsets count: code points, UTF-16 units, UTF-8 bytes'},
        'timeout_s': {'type': 'number', 'exclusiveMinimum': 0,
                      'description': "a deadline shorter than the server's"}}}
    errors = {str(status): error for status in (400, 408, 413, 415, 500, 503, 504)}

    def read(summary):
        return {'get': {'summary': summary, 'responses': {'200': {'description': 'ok'}}}}
    return {'openapi': '3.1.0', 'info': {'title': 'crf_lr', 'version': '1'}, 'paths': {
        '/v1/predict': {'post': {
            'summary': 'entities (or words) of each text',
            'requestBody': {'required': True, 'content': {'application/json': {'schema': body}}},
            'responses': {'200': {'description': 'one result per text', 'content': {
                'application/json': {'schema': {'type': 'object', 'properties': {
                    'results': {'type': 'array', 'items': result}}}}}}, **errors}}},
        '/v1/model': read('the model card'), '/v1/transitions': read("a CRF's transitions"),
        '/healthz': read('the process answers'), '/readyz': read('the model is loaded and the '
                                                                 'queue not full (else 503)'),
        '/metrics': read('Prometheus metrics'), '/openapi.json': read('this description')}}
