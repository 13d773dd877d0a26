"""Entity confidences of a trained word model (English, WordPiece) on its benchmark's test split:
how many entities cover a word of several pieces, how many get a confidence below their
sentence's decoded-path probability (impossible for the probability of what the model reads:
that path is one of the paths that hold the entity), and the calibration a temperature fitted
on dev gives (``crf_lr.evaluation.calibration.calibrate``, timed: the encoder's passes included).
Run it with another checkout first on the path to compare revisions (docs/results.md, "Words of
several pieces").

    python examples/task_ner.py --dataset conll2003 --train-limit 300 --output runs/en300
    python experiments/word_confidence.py runs/en300/model
    PYTHONPATH=../old-checkout python experiments/word_confidence.py runs/en300/model
"""
import argparse
import json
import time

import crf_lr  # noqa: F401  (environment before TensorFlow)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('model', help='a task script run\'s model/ folder (a word model)')
    parser.add_argument('--dataset', default='conll2003',
                        help='the benchmark whose dev and test splits are read')
    args = parser.parse_args(argv)
    from crf_lr.evaluation.calibration import calibrate
    from crf_lr.data.splits import load_splits
    from crf_lr.serving.tagger import Tagger
    tagger = Tagger.load(args.model)
    tagger.head.temperature = 1.0
    data = load_splits(args.dataset)
    texts = [e.tokens for e in data.test]
    entities = several = below = 0
    for text, prediction in zip(texts, tagger.decode(tagger.run(texts))):
        for (start, end, _), confidence in zip(prediction.spans, prediction.confidences):
            entities += 1
            several += any(len(tagger.encoder.pieces(word)) > 1 for word in text[start:end])
            below += confidence < prediction.path_probability * (1 - 1e-9)
    began = time.perf_counter()
    report = calibrate(tagger, ([e.tokens for e in data.dev], [e.spans for e in data.dev]),
                       (texts, [e.spans for e in data.test]))
    seconds = time.perf_counter() - began
    print(json.dumps(dict(
        crf_lr=crf_lr.__file__, test_entities=entities, over_words_of_several_pieces=several,
        confidence_below_path_probability=below, temperature=report['temperature'],
        calibrate_seconds=round(seconds, 1),
        **{f'{split} {when} (ECE, NLL)': (report[split][when]['ece'], report[split][when]['nll'])
           for split in ('dev', 'test') for when in ('before', 'after')})))


if __name__ == '__main__':
    main()
