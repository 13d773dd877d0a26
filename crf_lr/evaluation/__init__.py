"""How good the predictions are (no TensorFlow): entity and segmentation scores (`metrics`),
confidence calibration (`calibration`), CRF diagnostics (`diagnostics`), figures (`plots`,
matplotlib).
"""
