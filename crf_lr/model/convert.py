"""Hugging Face BERT / ALBERT checkpoints -> bert4keras-loadable (Google TF layout) checkpoints.

Input: a Hugging Face folder with ``config.json``, ``vocab.txt`` and ``model.safetensors`` or
``pytorch_model.bin``. Output: a folder with ``bert_config.json`` (or ``albert_config.json``),
``vocab.txt`` and ``model.ckpt.{index,data-00000-of-00001}`` named as Google's TF checkpoints, so
that ``bert4keras.models.build_transformer_model(config, 'DST/model.ckpt', model=...)`` loads it.

    >>> out = convert_checkpoint('hf/bert-base-chinese', 'b4k/bert-base-chinese')
    >>> bert = build_transformer_model(out.config_path, out.checkpoint_path, model=out.model_type)

Command line: ``python -m crf_lr.convert SRC DST``. Reading needs only NumPy (no PyTorch): the
``.bin`` pickle goes through a restricted unpickler that builds NumPy arrays and refuses every
other global, so a checkpoint cannot run code. Writing the checkpoint needs TensorFlow.
"""
import argparse
import collections
import json
import math
import os
import pickle
import reprlib
import shutil
import struct
import sys
import warnings
import zipfile

import numpy as np

from crf_lr.utils.atomic import atomic_path, atomic_write

SUPPORTED_MODEL_TYPES = ('bert', 'albert')
CHECKPOINT_NAME = 'model.ckpt'

Converted = collections.namedtuple(
    'Converted', 'config_path checkpoint_path vocab_path model_type ignored')
Converted.__doc__ = """Paths of a converted model, ready for ``build_transformer_model``.

config_path, checkpoint_path, vocab_path: str; model_type: 'bert' | 'albert' (bert4keras's
``model=`` argument); ignored: tuple of source tensor names that are not part of the encoder
(task heads, buffers such as ``position_ids``)."""


class ConversionError(ValueError):
    """A source folder or checkpoint that cannot be converted (the message says why and where)."""


class CheckpointPickleError(ConversionError, pickle.UnpicklingError):
    """A ``pytorch_model.bin`` pickle that is malicious or malformed, refused before it can run
    code or allocate more than its file holds (a ``ConversionError`` and an ``UnpicklingError``)."""


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80


def _short(value, limit=120):
    """A value read from a checkpoint as text cut to a readable length (a str as it is, anything
    else by ``reprlib``), so that a hostile file cannot fill a message."""
    text = value if isinstance(value, str) else _REPR.repr(value)
    return text if len(text) <= limit else f'{text[:limit // 2]}...{text[-(limit // 2):]}'


def _is_count(value):
    """An int >= 0 (not a bool): what sizes, strides, offsets and element counts must be."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# ---------------------------------------------------------------------------------------------
# Reading: safetensors
# ---------------------------------------------------------------------------------------------

_SAFETENSORS_DTYPES = {'F64': '<f8', 'F32': '<f4', 'F16': '<f2', 'BF16': 'bf16', 'I64': '<i8',
                       'I32': '<i4', 'I16': '<i2', 'I8': 'i1', 'U8': 'u1', 'BOOL': '?'}


def _bfloat16_to_float32(raw):
    """bfloat16 bit patterns (uint16 array) -> float32: bfloat16 is the top half of a float32."""
    return (raw.astype('<u4') << 16).view('<f4')


def read_safetensors(path):
    """Read every tensor of a ``.safetensors`` file with NumPy.

    The format is an 8-byte little-endian header length, a JSON header
    ``{name: {dtype, shape, data_offsets: [begin, end]}}`` and the raw little-endian bytes.

    Every header entry is checked (a known dtype, a shape of ints >= 0, a byte range inside the
    file that holds exactly that shape, no two ranges overlapping) before any tensor is read, so
    the arrays take no more memory than the file.

    Args:
        path: str, the ``.safetensors`` file.
    Returns:
        dict str -> np.ndarray (bfloat16 is widened to float32).
    Raises:
        ConversionError naming the file and the tensor at fault.

    >>> weights = read_safetensors('model.safetensors')
    >>> weights['embeddings.word_embeddings.weight'].shape      # (vocab_size, hidden_size)
    """
    size = os.path.getsize(path)
    with open(path, 'rb') as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConversionError(f'{path}: too short to be a safetensors file ({size} bytes)')
        header_len = struct.unpack('<Q', head)[0]
        if header_len > size - 8:
            raise ConversionError(f'{path}: header length {header_len} exceeds the file size '
                                  f'{size}; not a safetensors file or truncated')
        try:
            header = json.loads(f.read(header_len))
        except (ValueError, RecursionError) as exc:
            raise ConversionError(f'{path}: header is not valid JSON '
                                  f'({_short(str(exc))})') from None
    if not isinstance(header, dict):
        raise ConversionError(f'{path}: header is a JSON {type(header).__name__}, expected an '
                              f'object {{name: {{dtype, shape, data_offsets}}}}')
    data_start = 8 + header_len
    entries = sorted(_safetensors_entry(path, name, info, size - data_start)
                     for name, info in header.items() if name != '__metadata__')
    filled = [entry for entry in entries if entry[1] > entry[0]]          # by begin
    for (_, end, name, *_), (begin, _, other, *_) in zip(filled, filled[1:]):
        if end > begin:      # shared bytes would let a small file stand for many large tensors
            raise ConversionError(f'{path}: tensors {_short(name)!r} and {_short(other)!r} overlap '
                                  f'in the data (bytes [{begin}, {end}))')
    tensors = {}
    for begin, end, name, dtype, shape in entries:
        count = math.prod(shape)
        raw = np.fromfile(path, dtype='<u2' if dtype == 'bf16' else dtype, count=count,
                          offset=data_start + begin)
        tensors[name] = (_bfloat16_to_float32(raw) if dtype == 'bf16' else raw).reshape(shape)
    return tensors


def _safetensors_entry(path, name, info, data_size):
    """``(begin, end, name, NumPy dtype, shape)`` of one header entry, after checking that it has
    a known dtype, a shape of ints >= 0 and a byte range inside the data that holds exactly
    that many elements; else ``ConversionError`` naming ``path`` and the tensor."""
    where = f'{path}: tensor {_short(name)!r}'
    if not isinstance(info, dict) or not {'dtype', 'shape', 'data_offsets'} <= set(info):
        found = sorted(info) if isinstance(info, dict) else type(info).__name__
        raise ConversionError(f'{where}: its header entry must be an object with dtype, shape '
                              f'and data_offsets; found {_short(found)}')
    code, shape, offsets = info['dtype'], info['shape'], info['data_offsets']
    dtype = _SAFETENSORS_DTYPES.get(code) if isinstance(code, str) else None
    if dtype is None:
        raise ConversionError(f'{where}: unsupported dtype {_short(code)}; expected one of '
                              f'{sorted(_SAFETENSORS_DTYPES)}')
    if not isinstance(shape, list) or not all(_is_count(n) for n in shape):
        raise ConversionError(f'{where}: shape {_short(shape)} must be a list of ints >= 0')
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_count, offsets))
            or offsets[0] > offsets[1]):
        raise ConversionError(f'{where}: data_offsets {_short(offsets)} must be [begin, end] '
                              f'with 0 <= begin <= end')
    begin, end = offsets
    if end > data_size:
        raise ConversionError(f'{where} does not fit its byte range [{begin}, {end}): the data '
                              f'holds {data_size} bytes (a truncated file?)')
    nbytes = math.prod(shape) * (2 if dtype == 'bf16' else np.dtype(dtype).itemsize)
    if end - begin != nbytes:
        raise ConversionError(f'{where} of shape {tuple(shape)} and dtype {code} needs {nbytes} '
                              f'bytes; it does not fit its byte range [{begin}, {end})')
    return begin, end, name, dtype, tuple(shape)


# ---------------------------------------------------------------------------------------------
# Reading: PyTorch zip checkpoints through a restricted unpickler
# ---------------------------------------------------------------------------------------------

_TORCH_STORAGE_DTYPES = {
    'DoubleStorage': 'f8', 'FloatStorage': 'f4', 'HalfStorage': 'f2', 'BFloat16Storage': 'bf16',
    'LongStorage': 'i8', 'IntStorage': 'i4', 'ShortStorage': 'i2', 'CharStorage': 'i1',
    'ByteStorage': 'u1', 'BoolStorage': '?'}


class _StorageType:
    """Stands for ``torch.<X>Storage`` inside the pickle: only carries the element dtype."""

    def __init__(self, name):
        self.name, self.dtype = name, _TORCH_STORAGE_DTYPES[name]


def _rebuild_tensor(storage, storage_offset, size, stride, *unused):
    """NumPy version of ``torch._utils._rebuild_tensor(_v2)``: a read-only strided view of a
    storage (no copy: tensors that share a storage share its memory).

    Checked before anything is allocated: sizes, strides and offset are ints >= 0, the tensor has
    no more elements than its storage and its furthest element lies inside it, so a checkpoint
    cannot make a few bytes of storage stand for a huge array (stride 0)."""
    if not isinstance(storage, np.ndarray):
        raise pickle.UnpicklingError(f'a tensor\'s storage must be a persistent storage id, got '
                                     f'{_short(storage)}')
    if not (isinstance(size, (tuple, list)) and isinstance(stride, (tuple, list))
            and len(size) == len(stride) and all(map(_is_count, [*size, *stride, storage_offset]))):
        raise pickle.UnpicklingError(
            f'invalid tensor: size {_short(size)}, stride {_short(stride)}, offset '
            f'{_short(storage_offset)}; expected ints >= 0 and one stride per dimension')
    size, numel = tuple(size), math.prod(size)
    if numel == 0:
        return np.zeros(size, storage.dtype)
    last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride))
    if numel > storage.size or last >= storage.size:
        raise pickle.UnpicklingError(
            f'tensor of size {size}, stride {tuple(stride)}, offset {storage_offset} '
            f'({numel} elements, the furthest at {last}) does not fit its storage of '
            f'{storage.size} elements')
    return np.lib.stride_tricks.as_strided(
        storage[storage_offset:], shape=size,
        strides=[s * storage.itemsize for s in stride], writeable=False)


def _rebuild_parameter(data, requires_grad, backward_hooks, *unused):
    """NumPy version of ``torch._utils._rebuild_parameter``: the parameter's data."""
    return data


_ALLOWED_GLOBALS = {
    ('collections', 'OrderedDict'): collections.OrderedDict,
    ('torch._utils', '_rebuild_tensor'): _rebuild_tensor,
    ('torch._utils', '_rebuild_tensor_v2'): _rebuild_tensor,
    ('torch._utils', '_rebuild_parameter'): _rebuild_parameter,
}
_ALLOWED_GLOBALS.update({('torch', name): _StorageType(name) for name in _TORCH_STORAGE_DTYPES})


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler for PyTorch ``data.pkl`` files that only knows how to build NumPy arrays.

    ``find_class`` resolves only ``collections.OrderedDict``, the tensor/parameter rebuild
    functions of ``torch._utils`` and the ``torch.<X>Storage`` classes (mapped to NumPy
    equivalents); any other global raises, so a checkpoint can neither import modules nor call
    functions. Every fault of the pickle (a refused global, a tensor outside its storage, a
    truncated or malformed stream) raises :class:`CheckpointPickleError` naming ``source``.

    Args:
        file: binary file object of the pickle.
        load_storage: callable (key: str, dtype: str, numel: int) -> 1-D np.ndarray.
        source: str, the checkpoint path used in error messages.

    >>> with open('archive/data.pkl', 'rb') as f:      # read_torch_bin does this for a .bin
    ...     state = RestrictedUnpickler(f, load_storage, 'data.pkl').load()
    """

    def __init__(self, file, load_storage, source):
        super().__init__(file)
        self._load_storage, self._source = load_storage, source

    def load(self):
        try:
            return super().load()
        except ConversionError:
            raise                                        # from load_storage: says where already
        except pickle.UnpicklingError as exc:
            raise CheckpointPickleError(f'{self._source}: {exc}') from None
        except Exception as exc:      # noqa: BLE001  any fault of untrusted bytes is the file's
            raise CheckpointPickleError(
                f'{self._source}: not a plain PyTorch state-dict pickle '
                f'({type(exc).__name__}: {_short(str(exc))})') from None

    def find_class(self, module, name):
        allowed = _ALLOWED_GLOBALS.get((module, name))
        if allowed is None:
            raise pickle.UnpicklingError(
                f'refusing to load global {_short(f"{module}.{name}")} from the '
                f'checkpoint pickle; only tensor storages and rebuild functions are allowed '
                f'(the file may be malicious or not a plain state dict)')
        return allowed

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == 'storage'
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], (str, int))
                and _is_count(pid[4])):
            raise pickle.UnpicklingError(f'unexpected persistent id {_short(pid)}; expected '
                                         f'(\'storage\', <torch Storage>, key, location, numel)')
        _, storage_type, key, _location, numel = pid
        return self._load_storage(str(key), storage_type.dtype, numel)


def read_torch_bin(path):
    """Read a PyTorch (>= 1.6, zip format) state-dict file with NumPy, without PyTorch.

    The file is a zip of ``<archive>/data.pkl`` (the pickled dict) and ``<archive>/data/<key>``
    (raw storages); the pickle is read by :class:`RestrictedUnpickler`. Members must be stored
    uncompressed, as ``torch.save`` writes them, and each storage is read once, so the arrays take
    no more memory than the file (bfloat16: twice).

    Args:
        path: str, the ``pytorch_model.bin`` file.
    Returns:
        dict str -> np.ndarray (read-only views of the storages; bfloat16 widened to float32).
    Raises:
        ConversionError naming the file (:class:`CheckpointPickleError` for the pickle's faults).

    >>> weights = read_torch_bin('pytorch_model.bin')
    >>> sorted(weights)[:2]
    """
    if not zipfile.is_zipfile(path):
        raise ConversionError(f'{path}: not a zip-format PyTorch checkpoint (the legacy format of '
                              f'torch < 1.6 is not supported); re-save it with a recent torch or '
                              f'as model.safetensors')
    try:
        with zipfile.ZipFile(path) as archive:
            state = _load_state(archive, path)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise ConversionError(f'{path}: damaged zip archive ({_short(str(exc))})') from None
    if not isinstance(state, dict):
        raise ConversionError(f'{path}: the pickle holds a {type(state).__name__}, expected a '
                              f'state dict (name -> tensor)')
    for name, value in state.items():
        if not isinstance(name, str) or not isinstance(value, np.ndarray):
            raise ConversionError(f'{path}: entry {_short(name)!r} of the state dict is a '
                                  f'{type(value).__name__}, expected a tensor')
    return dict(state)


def _load_state(archive, path):
    """The unpickled ``data.pkl`` of an open PyTorch zip ``archive`` (``path``: for errors)."""
    pickles = [n for n in archive.namelist() if n.endswith('/data.pkl') or n == 'data.pkl']
    if len(pickles) != 1:
        raise ConversionError(f'{path}: expected one data.pkl in the zip, found '
                              f'{_short(pickles)}')
    root = pickles[0][:-len('data.pkl')]
    names = set(archive.namelist())
    for info in archive.infolist():
        if info.compress_type != zipfile.ZIP_STORED:
            raise ConversionError(f'{path}: zip member {_short(info.filename)!r} is compressed; '
                                  f'torch.save stores every member uncompressed (refused: a '
                                  f'compressed member can expand far beyond the file)')
    order = '>' if (root + 'byteorder' in names
                    and archive.read(root + 'byteorder').strip() == b'big') else '<'
    storages = {}

    def load_storage(key, dtype, numel):
        member = f'{root}data/{key}'
        if member not in names:
            raise ConversionError(f'{path}: storage {_short(member)!r} referenced by data.pkl is '
                                  f'missing')
        if (member, dtype, numel) not in storages:
            raw = archive.read(member)
            if len(raw) < numel * (2 if dtype == 'bf16' else np.dtype(dtype).itemsize):
                raise ConversionError(f'{path}: storage {_short(member)!r} has {len(raw)} bytes, '
                                      f'too few for {numel} elements of {dtype}')
            storages[member, dtype, numel] = (
                _bfloat16_to_float32(np.frombuffer(raw, order + 'u2', numel)) if dtype == 'bf16'
                else np.frombuffer(raw, np.dtype(dtype).newbyteorder(order), numel).astype(dtype))
        return storages[member, dtype, numel]

    with archive.open(pickles[0]) as f:
        return RestrictedUnpickler(f, load_storage, path).load()


def read_hf_weights(src_dir):
    """The tensors of a Hugging Face folder: ``model.safetensors`` if present, else
    ``pytorch_model.bin``. Returns (dict str -> np.ndarray, path of the file read).

    >>> weights, path = read_hf_weights('hf/bert-base-chinese')
    """
    for name, reader in (('model.safetensors', read_safetensors),
                         ('pytorch_model.bin', read_torch_bin)):
        path = os.path.join(src_dir, name)
        if os.path.isfile(path):
            return reader(path), path
    raise ConversionError(f'{src_dir}: no model.safetensors or pytorch_model.bin found '
                          f'(sharded checkpoints are not supported)')


# ---------------------------------------------------------------------------------------------
# Config and weight mapping (pure NumPy)
# ---------------------------------------------------------------------------------------------

# Hugging Face hidden_act -> bert4keras activation name. HF 'gelu' is the exact (erf) GELU;
# 'gelu_new' / 'gelu_pytorch_tanh' are the tanh approximation of Google's original code.
_ACTIVATIONS = {'gelu': 'gelu_erf', 'gelu_new': 'gelu_tanh', 'gelu_pytorch_tanh': 'gelu_tanh',
                'relu': 'relu', 'tanh': 'tanh', 'swish': 'swish', 'silu': 'swish'}
_GOOGLE_FIELDS = ('vocab_size', 'hidden_size', 'num_hidden_layers', 'num_attention_heads',
                  'intermediate_size', 'max_position_embeddings', 'type_vocab_size',
                  'initializer_range', 'hidden_dropout_prob', 'attention_probs_dropout_prob')
_SIZE_FIELDS = _GOOGLE_FIELDS[:7] + ('embedding_size',)
_BERT4KERAS_LAYER_NORM_EPS = 1e-12


def google_config(hf_config, source='config.json'):
    """Google-style config (what bert4keras reads) from a Hugging Face ``config.json`` dict.

    Args:
        hf_config: dict, the Hugging Face config (``model_type`` 'bert' or 'albert').
        source: str, the config's path for error messages.
    Returns:
        (model_type: 'bert' | 'albert', config: dict for
        ``bert_config.json``/``albert_config.json``).

    >>> model_type, config = google_config(json.load(open('hf/config.json')))
    >>> config['hidden_act']                            # 'gelu_erf' for HF's exact 'gelu'
    """
    if not isinstance(hf_config, dict):
        raise ConversionError(f'{source}: holds a JSON {type(hf_config).__name__}, expected an '
                              f'object of config fields')
    model_type = hf_config.get('model_type')
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConversionError(f'{source}: model_type {_short(repr(model_type))} is not '
                              f'supported; expected one of {SUPPORTED_MODEL_TYPES}')
    defaults = dict(type_vocab_size=2, initializer_range=0.02, hidden_dropout_prob=0.1,
                    attention_probs_dropout_prob=0.1, max_position_embeddings=512)
    config = {}
    for field in _GOOGLE_FIELDS:
        if field not in hf_config and field not in defaults:
            raise ConversionError(f'{source}: required field {field!r} is missing')
        config[field] = hf_config.get(field, defaults.get(field))
    act = hf_config.get('hidden_act', 'gelu')
    if act not in _ACTIVATIONS:
        raise ConversionError(f'{source}: hidden_act {act!r} has no bert4keras equivalent; '
                              f'expected one of {sorted(_ACTIVATIONS)}')
    config['hidden_act'] = _ACTIVATIONS[act]
    position = hf_config.get('position_embedding_type', 'absolute')
    if position != 'absolute':
        raise ConversionError(f'{source}: position_embedding_type {position!r} is not supported '
                              f'by bert4keras\'s BERT/ALBERT; expected \'absolute\'')
    eps = hf_config.get('layer_norm_eps', _BERT4KERAS_LAYER_NORM_EPS)
    config['layer_norm_eps'] = eps
    if eps != _BERT4KERAS_LAYER_NORM_EPS:
        warnings.warn(f'{source}: layer_norm_eps={eps} but bert4keras always uses '
                      f'{_BERT4KERAS_LAYER_NORM_EPS}; outputs will differ slightly from the '
                      f'original (relative error about eps / variance of the hidden states)')
    if model_type == 'albert':
        groups, inner = hf_config.get('num_hidden_groups', 1), hf_config.get('inner_group_num', 1)
        if groups != 1 or inner != 1:
            raise ConversionError(f'{source}: ALBERT with num_hidden_groups={groups}, '
                                  f'inner_group_num={inner} is not supported; bert4keras\'s '
                                  f'ALBERT shares one layer (both must be 1)')
        config.update(embedding_size=hf_config.get('embedding_size', 128), num_hidden_groups=1,
                      inner_group_num=1, down_scale_factor=1, net_structure_type=0, gap_size=0,
                      num_memory_blocks=0)
    for field in _SIZE_FIELDS:
        if field in config and not (_is_count(config[field]) and config[field] > 0):
            raise ConversionError(f'{source}: {field} must be a positive int, got '
                                  f'{_short(config[field])}')
    return model_type, config


def _variable_table(model_type, config):
    """[(hf module path, tf scope, kind, tf shape of the weight, optional)] for one architecture.

    kind: 'embedding' (``.weight`` -> scope), 'dense' (``.weight``ᵀ -> kernel, ``.bias``),
    'norm' (``.weight`` -> gamma, ``.bias`` -> beta)."""
    h, i = config['hidden_size'], config['intermediate_size']
    e = config.get('embedding_size', h)
    table = [
        ('embeddings.word_embeddings', 'bert/embeddings/word_embeddings', 'embedding',
         (config['vocab_size'], e), False),
        ('embeddings.position_embeddings', 'bert/embeddings/position_embeddings', 'embedding',
         (config['max_position_embeddings'], e), False),
        ('embeddings.token_type_embeddings', 'bert/embeddings/token_type_embeddings', 'embedding',
         (config['type_vocab_size'], e), False),
        ('embeddings.LayerNorm', 'bert/embeddings/LayerNorm', 'norm', (e,), False),
    ]
    if model_type == 'bert':
        for n in range(config['num_hidden_layers']):
            hf, tf_ = f'encoder.layer.{n}.', f'bert/encoder/layer_{n}/'
            table += [
                (hf + 'attention.self.query', tf_ + 'attention/self/query', 'dense', (h, h), False),
                (hf + 'attention.self.key', tf_ + 'attention/self/key', 'dense', (h, h), False),
                (hf + 'attention.self.value', tf_ + 'attention/self/value', 'dense', (h, h), False),
                (hf + 'attention.output.dense', tf_ + 'attention/output/dense', 'dense', (h, h),
                 False),
                (hf + 'attention.output.LayerNorm', tf_ + 'attention/output/LayerNorm', 'norm',
                 (h,), False),
                (hf + 'intermediate.dense', tf_ + 'intermediate/dense', 'dense', (h, i), False),
                (hf + 'output.dense', tf_ + 'output/dense', 'dense', (i, h), False),
                (hf + 'output.LayerNorm', tf_ + 'output/LayerNorm', 'norm', (h,), False),
            ]
        table.append(('pooler.dense', 'bert/pooler/dense', 'dense', (h, h), True))
    else:
        hf, tf_ = 'encoder.albert_layer_groups.0.albert_layers.0.', \
            'bert/encoder/transformer/group_0/inner_group_0/'
        table += [
            ('encoder.embedding_hidden_mapping_in', 'bert/encoder/embedding_hidden_mapping_in',
             'dense', (e, h), False),
            (hf + 'attention.query', tf_ + 'attention_1/self/query', 'dense', (h, h), False),
            (hf + 'attention.key', tf_ + 'attention_1/self/key', 'dense', (h, h), False),
            (hf + 'attention.value', tf_ + 'attention_1/self/value', 'dense', (h, h), False),
            (hf + 'attention.dense', tf_ + 'attention_1/output/dense', 'dense', (h, h), False),
            (hf + 'attention.LayerNorm', tf_ + 'LayerNorm', 'norm', (h,), False),
            (hf + 'ffn', tf_ + 'ffn_1/intermediate/dense', 'dense', (h, i), False),
            (hf + 'ffn_output', tf_ + 'ffn_1/intermediate/output/dense', 'dense', (i, h), False),
            (hf + 'full_layer_layer_norm', tf_ + 'LayerNorm_1', 'norm', (h,), False),
            ('pooler', 'bert/pooler/dense', 'dense', (h, h), True),
        ]
    return table


def _normalised_names(weights, model_type):
    """Map 'bert.encoder...LayerNorm.gamma' style keys to 'encoder...LayerNorm.weight'.
    Returns dict normalised name -> original name."""
    prefix = model_type + '.'
    if not any(k.startswith(prefix + 'embeddings.') for k in weights):
        prefix = ''
    names = {}
    for key in weights:
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if name.endswith('.gamma'):
            name = name[:-len('gamma')] + 'weight'
        elif name.endswith('.beta'):
            name = name[:-len('beta')] + 'bias'
        names[name] = key
    return names


def tf_variables(weights, model_type, config, source='checkpoint'):
    """Rename and transpose Hugging Face tensors into Google TF checkpoint variables.

    Args:
        weights: dict str -> np.ndarray, a Hugging Face state dict (with or without the
            ``bert.`` / ``albert.`` prefix; LayerNorm as weight/bias or gamma/beta).
        model_type, config: from :func:`google_config`.
        source: str, the checkpoint path for error messages.
    Returns:
        (dict tf variable name -> float32 np.ndarray, tuple of source names left unused).

    >>> variables, ignored = tf_variables(read_safetensors(path), *google_config(hf_config))
    >>> variables['bert/encoder/layer_0/attention/self/query/kernel'].shape   # (hidden, hidden)
    """
    names = _normalised_names(weights, model_type)
    variables, used, missing = {}, set(), []
    suffixes = {'embedding': [('weight', '', False)],
                'dense': [('weight', '/kernel', True), ('bias', '/bias', False)],
                'norm': [('weight', '/gamma', False), ('bias', '/beta', False)]}
    for hf, scope, kind, shape, optional in _variable_table(model_type, config):
        keys = [f'{hf}.{suffix}' for suffix, _, _ in suffixes[kind]]
        if optional and not any(k in names for k in keys):
            continue
        for key, (_, tf_suffix, transpose) in zip(keys, suffixes[kind]):
            if key not in names:
                missing.append(key)
                continue
            value = np.asarray(weights[names[key]])       # cast only once its shape is checked
            value = value.T if transpose else value
            expected = shape if tf_suffix in ('', '/kernel') else shape[-1:]
            if value.shape != tuple(expected):
                found = value.T.shape if transpose else value.shape
                wanted = tuple(expected[::-1]) if transpose else tuple(expected)
                raise ConversionError(f'{source}: tensor {names[key]!r} has shape {found}, '
                                      f'expected {wanted} from the config (hidden_size='
                                      f'{config["hidden_size"]}, intermediate_size='
                                      f'{config["intermediate_size"]}, vocab_size='
                                      f'{config["vocab_size"]})')
            value = np.ascontiguousarray(value, dtype=np.float32)
            if not np.isfinite(value).all():
                raise ConversionError(f'{source}: tensor {names[key]!r} holds '
                                      f'{np.count_nonzero(~np.isfinite(value))} NaN or inf values')
            variables[scope + tf_suffix] = value
            used.add(names[key])
    if missing:
        raise ConversionError(f'{source}: {len(missing)} tensors of a {model_type} encoder are '
                              f'missing, e.g. {missing[:3]}; is this a {model_type} checkpoint?')
    return variables, tuple(sorted(set(weights) - used))


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------

def write_tf_checkpoint(variables, prefix):
    """Write a TF (V2 bundle) checkpoint readable by ``tf.train.load_variable(prefix, name)``.

    Args:
        variables: dict str -> np.ndarray, variable name -> value.
        prefix: str, checkpoint prefix, e.g. ``'out/model.ckpt'`` (writes ``.index`` and
            ``.data-00000-of-00001`` and a ``checkpoint`` state file beside them, each written
            under a temporary name, fsynced and renamed: a kill leaves no torn file).

    >>> write_tf_checkpoint({'bert/pooler/dense/bias': np.zeros(4, 'float32')}, 'out/model.ckpt')
    """
    from crf_lr.compat import tf
    names = sorted(variables)
    folder, base = os.path.split(prefix)
    temporary = os.path.join(folder, f'.{base}.partial-{os.getpid()}')
    tf.raw_ops.SaveV2(prefix=temporary, tensor_names=names, shape_and_slices=[''] * len(names),
                      tensors=[tf.constant(variables[n]) for n in names])
    for suffix in ('.data-00000-of-00001', '.index'):          # the index last: it names the data
        with atomic_path(prefix + suffix) as path:
            os.replace(temporary + suffix, path)
    with atomic_write(os.path.join(folder or '.', 'checkpoint')) as f:
        f.write(f'model_checkpoint_path: "{base}"\nall_model_checkpoint_paths: "{base}"\n')


def _read_vocab_size(path):
    try:
        with open(path, encoding='utf-8') as f:
            return sum(1 for _ in f)
    except UnicodeDecodeError as exc:
        raise ConversionError(f'{path}: not UTF-8 text ({_short(str(exc))})') from None


def convert_checkpoint(src_dir, dst_dir):
    """Convert a Hugging Face BERT/ALBERT folder into a bert4keras-loadable folder.

    Args:
        src_dir: str, folder with ``config.json``, ``vocab.txt`` and ``model.safetensors`` or
            ``pytorch_model.bin`` (encoder weights with or without the ``bert.``/``albert.``
            prefix; task heads beside them are ignored).
        dst_dir: str, output folder (created; existing files of the same names are replaced,
            each whole: :mod:`crf_lr.utils.atomic`).
    Returns:
        :class:`Converted` (config_path, checkpoint_path, vocab_path, model_type, ignored).
    Raises:
        ConversionError: another architecture, a missing file, a missing tensor or a shape that
            does not match the config.

    >>> out = convert_checkpoint('hf/minilm', 'b4k/minilm')
    >>> bert = build_transformer_model(out.config_path, out.checkpoint_path, model=out.model_type)
    """
    if not os.path.isdir(src_dir):
        raise ConversionError(f'{src_dir}: source folder does not exist')
    if os.path.abspath(src_dir) == os.path.abspath(dst_dir):
        raise ConversionError(f'{dst_dir}: the output folder must differ from the source folder')
    config_file = os.path.join(src_dir, 'config.json')
    vocab_file = os.path.join(src_dir, 'vocab.txt')
    for path in (config_file, vocab_file):
        if not os.path.isfile(path):
            raise ConversionError(f'{path}: missing; a Hugging Face BERT/ALBERT folder needs '
                                  'config.json, vocab.txt and model.safetensors or '
                                  'pytorch_model.bin')
    with open(config_file, encoding='utf-8') as f:
        try:
            hf_config = json.load(f)
        except ValueError as exc:
            raise ConversionError(f'{config_file}: not valid JSON ({exc})') from None
    model_type, config = google_config(hf_config, config_file)
    vocab_lines = _read_vocab_size(vocab_file)
    if vocab_lines > config['vocab_size']:
        raise ConversionError(f'{vocab_file}: {vocab_lines} tokens but config.json has '
                              f'vocab_size={config["vocab_size"]}')
    weights, weights_file = read_hf_weights(src_dir)
    variables, ignored = tf_variables(weights, model_type, config, weights_file)

    os.makedirs(dst_dir, exist_ok=True)
    config_path = os.path.join(dst_dir, f'{model_type}_config.json')
    with atomic_write(config_path) as f:
        json.dump(config, f, indent=2)
    vocab_path = os.path.join(dst_dir, 'vocab.txt')
    with atomic_path(vocab_path) as path:
        shutil.copyfile(vocab_file, path)
    checkpoint_path = os.path.join(dst_dir, CHECKPOINT_NAME)
    write_tf_checkpoint(variables, checkpoint_path)
    return Converted(config_path, checkpoint_path, vocab_path, model_type, ignored)


def main(argv=None):
    """Command line: ``python -m crf_lr.convert SRC DST``."""
    parser = argparse.ArgumentParser(
        prog='python -m crf_lr.convert',
        description='Convert a Hugging Face BERT/ALBERT folder (config.json, vocab.txt, '
                    'model.safetensors or pytorch_model.bin) into a folder that '
                    'bert4keras.models.build_transformer_model loads (Google-style config, '
                    'vocab.txt, TF checkpoint model.ckpt). PyTorch is not needed.')
    parser.add_argument('src', help='Hugging Face model folder')
    parser.add_argument('dst', help='output folder (created)')
    args = parser.parse_args(argv)
    try:
        out = convert_checkpoint(args.src, args.dst)
    except (ConversionError, OSError) as exc:       # OSError: unreadable source, unwritable DST
        print(f'error: {exc}', file=sys.stderr)
        return 1
    print(f'model type : {out.model_type}\nconfig     : {out.config_path}\n'
          f'checkpoint : {out.checkpoint_path}\nvocab      : {out.vocab_path}')
    if out.ignored:
        print(f'ignored {len(out.ignored)} tensors that are not part of the encoder: '
              f'{", ".join(out.ignored)}')
    print(f'load with  : build_transformer_model({out.config_path!r}, '
          f'{out.checkpoint_path!r}, model={out.model_type!r})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
