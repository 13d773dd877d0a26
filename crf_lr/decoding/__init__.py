"""Scores back to labels (NumPy; TensorFlow only in `viterbi_decode_tf`): Viterbi paths
(`viterbi`), CRF posteriors and span probabilities (`posteriors`), GlobalPointer spans
(`spans`).
"""
