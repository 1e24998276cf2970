"""The ONNX graph: loading and inventory (`model`), the low-precision formats (`formats`), the
emulation rewrite (`emulate`) and the real mixed-precision graph (`mixed`)."""
