"""The saved-model folder format (`model.h5`, `labels.json`, `vocab.txt`) and its check, without
TensorFlow or training code.
"""
import json
import os

from crf_lr.utils.atomic import recover_folder


MODEL_FILES = ('model.h5', 'labels.json', 'vocab.txt')
LABELS_KEYS = ('head', 'types', 'scheme', 'labels', 'units', 'lowercase', 'maxlen')
HDF5_SIGNATURE = b'\x89HDF\r\n\x1a\n'


def model_files(folder):
    """Paths of the saved model in ``folder`` (a run's ``model/``): ``model.h5``, ``labels.json``,
    ``vocab.txt``. Cheap and TensorFlow-free, so a command can check its arguments first; puts
    the previous model back if a kill fell inside the swap of a new one
    (:func:`crf_lr.utils.atomic.recover_folder`).

    Raises:
        FileNotFoundError naming what is missing, with "did you mean" when ``folder`` is the run
        folder that holds the model.

        >>> model_h5, labels_json, vocab_txt = model_files('runs/ner/model')
    """
    try:
        recover_folder(folder)
    except OSError:
        pass                                      # a read-only copy: check what is there
    paths = [os.path.join(folder, name) for name in MODEL_FILES]
    missing = [os.path.basename(p) for p in paths if not os.path.isfile(p)]
    if not missing:
        return paths
    if not os.path.isdir(folder):
        raise FileNotFoundError(f'{folder}: no such folder (expected the model/ folder of a task '
                                f'script run)')
    inner = os.path.join(folder, 'model')
    if all(os.path.isfile(os.path.join(inner, name)) for name in MODEL_FILES):
        raise FileNotFoundError(f'{folder} is a run folder: did you mean {inner}?')
    raise FileNotFoundError(f'{folder} is not a saved model folder: missing {", ".join(missing)} '
                            f'(expected the model/ folder of a task script run)')


def _check_hdf5_model(path):
    """Refuse an empty, non-HDF5, truncated or model-less ``model.h5`` (h5py, no TensorFlow)."""
    size = os.path.getsize(path)
    if size == 0:
        raise ValueError(f'{path}: empty file (0 bytes); the model was not saved completely')
    with open(path, 'rb') as f:
        signature = f.read(len(HDF5_SIGNATURE))
    if signature != HDF5_SIGNATURE:
        raise ValueError(f'{path}: not an HDF5 file (it starts with {signature!r}, not the HDF5 '
                         f'signature)')
    import h5py
    try:
        with h5py.File(path, 'r') as f:
            if 'model_config' not in f.attrs or 'model_weights' not in f:
                raise ValueError(f'{path}: an HDF5 file without a Keras model (no model_config '
                                 f'or model_weights): not saved by model.save')
    except OSError as error:
        reason = str(error).split(' (')[0].replace('Unable to synchronously open file', '')
        raise ValueError(f'{path}: a damaged or truncated HDF5 file ({size} bytes; h5py: '
                         f'{reason.strip(" ()")})') from None


def _read_labels(path):
    """``labels.json`` as a dict holding every key of ``LABELS_KEYS``."""
    try:
        with open(path, encoding='utf-8') as f:
            meta = json.load(f)
    except UnicodeDecodeError as error:
        raise ValueError(f'{path}: not UTF-8 text ({error.reason} at byte {error.start})') from None
    except json.JSONDecodeError as error:
        raise ValueError(f'{path}: not valid JSON ({error.msg} at line {error.lineno} column '
                         f'{error.colno})') from None
    if not isinstance(meta, dict):
        raise ValueError(f'{path}: expected a JSON object, found a {type(meta).__name__}')
    missing = [key for key in LABELS_KEYS if key not in meta]
    if missing:
        raise ValueError(f'{path}: missing the key{"s" * (len(missing) > 1)} '
                         f'{", ".join(missing)} (a labels.json written by Tagger.save holds '
                         f'{", ".join(LABELS_KEYS)})')
    return meta


def check_model_folder(folder):
    """:func:`model_files`, then the files themselves, before any TensorFlow work: ``model.h5``
    an HDF5 file holding a Keras model (not empty, truncated or something else),
    ``labels.json`` a JSON object with every key of ``LABELS_KEYS``, ``vocab.txt`` not empty.

    Returns:
        ``(model_h5, labels_json, vocab_txt, labels)``: the paths and the parsed ``labels.json``.
    Raises:
        FileNotFoundError (a missing file or folder) or ValueError (a damaged one), one line
        naming the file and the fault.

        >>> model_h5, labels_json, vocab_txt, meta = check_model_folder('runs/ner/model')
    """
    model_path, labels_path, vocab_path = model_files(folder)
    _check_hdf5_model(model_path)
    meta = _read_labels(labels_path)
    if os.path.getsize(vocab_path) == 0:
        raise ValueError(f'{vocab_path}: empty file (the vocabulary has one token a line)')
    return model_path, labels_path, vocab_path, meta
