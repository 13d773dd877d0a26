"""Text in, batches out (no TensorFlow): reading files (`files`, the readers of `segmentation` and
`ner`, user files and their detection in `formats`), the benchmarks as data (`benchmarks`),
which sentences train, select and test (`splits`), tagging schemes (`tagging`), offsets <->
tokens (`alignment`), units -> pieces (`pieces`), windows (`windows`), padded batches
(`batching`) and whether an encoder's vocabulary fits a text (`vocabulary`).
"""
